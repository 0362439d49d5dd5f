// The kernels of ../kv_kernels.cu compiled for the host emulation (cuda_emu.h).
#include "cuda_emu.h"
#include "../kv_kernels.cu"
