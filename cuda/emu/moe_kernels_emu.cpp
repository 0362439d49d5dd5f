// The kernels of ../moe_kernels.cu compiled for the host emulation (cuda_emu.h).
#include "cuda_emu.h"
#include "../moe_kernels.cu"
