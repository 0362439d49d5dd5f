// The kernels of ../cuda_device.cu compiled for the host emulation (cuda_emu.h).
#include "cuda_emu.h"
#include "../cuda_device.cu"
