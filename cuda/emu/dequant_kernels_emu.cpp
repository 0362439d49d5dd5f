// The kernels of ../dequant_kernels.cu compiled for the host emulation (cuda_emu.h).
#include "cuda_emu.h"
#include "../dequant_kernels.cu"
