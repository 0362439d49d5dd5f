// Host emulation for the tests of machines without a GPU: the kernel
// launcher of cuda_emu.h (each launch runs its blocks one after another,
// the threads of a block as coroutines with barriers), and stand-ins for
// the CUDA runtime and cuBLAS calls the backend makes: memory is host
// memory, streams run synchronously, one device exists, graph capture is
// refused (the backend then runs without graphs), and cublasGemmEx is a
// plain loop with fp32 accumulation.  Linked only into the *-emu tests.
#undef _FORTIFY_SOURCE /* _longjmp between coroutine stacks is intended here */
#include "cuda_emu.h"

#include <cublas_v2.h>
#include <setjmp.h>
#include <ucontext.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

emu_thread_ctx emu_ctx;

namespace
{

// A launch runs on the calling thread: the threads of a block are
// coroutines (ucontext) resumed round-robin; a barrier yields until every
// thread it waits for has arrived.  Deterministic, and cheap enough to run
// thousands of blocks in a test.
struct barrier_state {
	int arrived = 0;
	unsigned gen = 0;
};

struct emu_block {
	int n_threads = 0, warp = 32;
	std::vector<ucontext_t> ctx;
	std::vector<std::vector<char>> stacks;
	std::vector<char> done, started;
	struct jump {
		jmp_buf b;
	};
	std::vector<jump> jb; /* where each coroutine yielded */
	jmp_buf sched_jb;
	std::vector<uint3> tids;
	ucontext_t sched;
	int current = -1;
	barrier_state block_bar, end_bar;
	bool finished = false;
	std::vector<barrier_state> warp_bars;
	std::vector<float> shfl;
	const std::function<void()> *body = nullptr;
};

emu_block g_blk;
cudaError_t g_last = cudaSuccess;
const size_t STACK_BYTES = 64 << 10;

// Switches use _setjmp/_longjmp (no signal-mask system calls); ucontext
// only makes each coroutine's first entry onto its own stack.
void yield_to_scheduler()
{
	if (!_setjmp(g_blk.jb[(size_t)g_blk.current].b))
		_longjmp(g_blk.sched_jb, 1);
}

void barrier_wait(barrier_state &b, int count)
{
	unsigned gen = b.gen;
	if (++b.arrived == count) {
		b.arrived = 0;
		b.gen++;
		return;
	}
	while (b.gen == gen)
		yield_to_scheduler();
}

// Advances emu_ctx.bid to the next block; false after the last.
bool next_block()
{
	uint3 &b = emu_ctx.bid;
	const dim3 &g = emu_ctx.gdim;
	if (++b.x < g.x)
		return true;
	b.x = 0;
	if (++b.y < g.y)
		return true;
	b.y = 0;
	return ++b.z < g.z;
}

// Each coroutine runs every block of the launch in turn; the last thread to
// finish a block moves all of them to the next one.
void coroutine_entry()
{
	for (;;) {
		(*g_blk.body)();
		barrier_state &b = g_blk.end_bar;
		unsigned gen = b.gen;
		if (++b.arrived == g_blk.n_threads) {
			b.arrived = 0;
			g_blk.finished = !next_block();
			b.gen++;
		} else {
			while (b.gen == gen)
				yield_to_scheduler();
		}
		if (g_blk.finished)
			break;
	}
	g_blk.done[(size_t)g_blk.current] = 1;
	_longjmp(g_blk.sched_jb, 1);
}

/* Resumes coroutine t until it yields or finishes; its own function so
 * that nothing of the round-robin loop lives across the _setjmp. */
__attribute__((noinline)) void resume(int t)
{
	g_blk.current = t;
	emu_ctx.tid = g_blk.tids[(size_t)t];
	if (_setjmp(g_blk.sched_jb))
		return;
	if (g_blk.started[(size_t)t]) {
		_longjmp(g_blk.jb[(size_t)t].b, 1);
	} else {
		g_blk.started[(size_t)t] = 1;
		swapcontext(&g_blk.sched, &g_blk.ctx[(size_t)t]);
	}
}

void run_launch()
{
	int n = g_blk.n_threads;
	volatile int left = n; /* -Wclobbered: the coroutines _longjmp back in here */
	for (int t = 0; t < n; t++) {
		g_blk.done[(size_t)t] = 0;
		g_blk.started[(size_t)t] = 0;
		getcontext(&g_blk.ctx[(size_t)t]);
		g_blk.ctx[(size_t)t].uc_stack.ss_sp = g_blk.stacks[(size_t)t].data();
		g_blk.ctx[(size_t)t].uc_stack.ss_size = STACK_BYTES;
		g_blk.ctx[(size_t)t].uc_link = nullptr;
		makecontext(&g_blk.ctx[(size_t)t], coroutine_entry, 0);
	}
	while (left > 0)
		for (int t = 0; t < n; t++) {
			if (g_blk.done[(size_t)t])
				continue;
			resume(t);
			if (g_blk.done[(size_t)t])
				left--;
		}
}

} // namespace

void emu_syncthreads()
{
	barrier_wait(g_blk.block_bar, g_blk.n_threads);
}

float emu_shfl_xor(float v, int mask)
{
	int tid = g_blk.current, ws = g_blk.warp, base = tid / ws * ws, lane = tid - base;
	barrier_state &wb = g_blk.warp_bars[(size_t)(tid / ws)];
	g_blk.shfl[(size_t)tid] = v;
	barrier_wait(wb, ws);
	float r = g_blk.shfl[(size_t)(base + ((lane ^ mask) % ws))];
	barrier_wait(wb, ws);
	return r;
}

void emu_launch(dim3 grid, dim3 block, const std::function<void()> &body)
{
	int n = (int)(block.x * block.y * block.z);
	int ws = n < 32 ? n : 32;
	if (n <= 0 || n > 1024 || n % ws) {
		g_last = cudaErrorInvalidConfiguration;
		return;
	}
	g_blk.n_threads = n;
	g_blk.warp = ws;
	g_blk.ctx.resize((size_t)n);
	g_blk.done.assign((size_t)n, 0);
	g_blk.started.assign((size_t)n, 0);
	g_blk.jb.resize((size_t)n);
	g_blk.shfl.assign((size_t)n, 0.0f);
	g_blk.warp_bars.assign((size_t)(n / ws), barrier_state());
	g_blk.block_bar = barrier_state();
	while (g_blk.stacks.size() < (size_t)n)
		g_blk.stacks.emplace_back(STACK_BYTES);
	g_blk.tids.resize((size_t)n);
	for (int t = 0; t < n; t++)
		g_blk.tids[(size_t)t] =
		    make_uint3((unsigned)t % block.x, (unsigned)t / block.x % block.y,
		               (unsigned)t / (block.x * block.y));
	g_blk.body = &body;
	emu_ctx.bdim = block;
	emu_ctx.gdim = grid;
	if (grid.x == 0 || grid.y == 0 || grid.z == 0) {
		g_last = cudaErrorInvalidConfiguration;
		return;
	}
	emu_ctx.bid = make_uint3(0, 0, 0);
	g_blk.end_bar = barrier_state();
	g_blk.finished = false;
	run_launch();
}

// ------------------------------------------------------------- runtime

cudaError_t cudaGetLastError(void)
{
	cudaError_t e = g_last;
	g_last = cudaSuccess;
	return e;
}

const char *cudaGetErrorString(cudaError_t error)
{
	static const char *const names[] = {"no error (emulated)", "emulated error"};
	return names[error == cudaSuccess ? 0 : 1];
}

cudaError_t cudaGetDeviceCount(int *count)
{
	*count = 1;
	return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	memset(prop, 0, sizeof(*prop));
	snprintf(prop->name, sizeof(prop->name), "host emulation");
	prop->accessPolicyMaxWindowSize = 1 << 20;
	prop->persistingL2CacheMaxSize = 1 << 20;
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaSetDevice(int device)
{
	return device == 0 ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
	*free_b = (size_t)1 << 30;
	*total = (size_t)2 << 30;
	return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t size)
{
	*p = size > ((size_t)8 << 30) ? NULL : calloc(1, size ? size : 1);
	return *p ? cudaSuccess : (g_last = cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t size)
{
	return cudaMalloc(p, size);
}

cudaError_t cudaFreeHost(void *p)
{
	free(p);
	return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind)
{
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                            cudaStream_t stream)
{
	memmove(dst, src, n);
	return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int value, size_t n)
{
	memset(p, value, n);
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
	*s = (cudaStream_t)malloc(1);
	return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
	free(s);
	return cudaSuccess;
}

cudaError_t cudaStreamSetAttribute(cudaStream_t s, cudaStreamAttrID attr,
                                   const cudaStreamAttrValue *value)
{
	return cudaSuccess;
}

cudaError_t cudaDeviceSetLimit(enum cudaLimit limit, size_t value)
{
	return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode)
{
	return cudaErrorNotSupported;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
	*g = NULL;
	return cudaErrorNotSupported;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags)
{
	return cudaErrorNotSupported;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
	return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e)
{
	return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s)
{
	return cudaErrorNotSupported;
}

cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	*e = (cudaEvent_t)malloc(1);
	return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	free(e);
	return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
	return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	*ms = 1.0f;
	return cudaSuccess;
}

// -------------------------------------------------------------- cuBLAS

cublasStatus_t cublasCreate_v2(cublasHandle_t *h)
{
	*h = (cublasHandle_t)malloc(1);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h)
{
	free(h);
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s)
{
	return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes)
{
	return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s)
{
	return s == CUBLAS_STATUS_SUCCESS ? "success (emulated)" : "emulated cublas error";
}

static float gemm_load(const void *p, cudaDataType t, size_t i)
{
	if (t == CUDA_R_32F)
		return ((const float *)p)[i];
	if (t == CUDA_R_16F)
		return __half2float(((const __half *)p)[i]);
	return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
}

// C (m, n) = alpha op(A) op(B) + beta C, column-major; only the forms the
// backend uses (op_T on A, op_N on B, fp32 C).
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void *alpha, const void *A, cudaDataType at,
                            int lda, const void *B, cudaDataType bt, int ldb, const void *beta,
                            void *C, cudaDataType ct, int ldc, cublasComputeType_t ctype,
                            cublasGemmAlgo_t algo)
{
	if (ta != CUBLAS_OP_T || tb != CUBLAS_OP_N || ct != CUDA_R_32F)
		return CUBLAS_STATUS_NOT_SUPPORTED;
	float a = *(const float *)alpha, b = *(const float *)beta;
	float *c = (float *)C;
	for (int j = 0; j < n; j++)
		for (int i = 0; i < m; i++) {
			float s = 0.0f;
			for (int l = 0; l < k; l++)
				s += gemm_load(A, at, (size_t)i * lda + l) *
				     gemm_load(B, bt, (size_t)j * ldb + l);
			float *cij = &c[(size_t)j * ldc + i];
			*cij = a * s + (b != 0.0f ? b * *cij : 0.0f);
		}
	return CUBLAS_STATUS_SUCCESS;
}
