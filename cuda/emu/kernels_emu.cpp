// The kernels of ../kernels.cu compiled for the host emulation (cuda_emu.h).
#include "cuda_emu.h"
#include "../kernels.cu"
