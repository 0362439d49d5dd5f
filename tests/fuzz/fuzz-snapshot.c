/* Fuzz target: the session snapshot reader (session/snapshot.h).  The input
 * is read as it is and once more resealed (its checksum recomputed), so
 * that mutations reach the field checks behind the checksum.  Checks beyond
 * the sanitizers: a refusal has a message; what decodes imports into a
 * real cache of its geometry (when small), which then takes more tokens,
 * and its export re-encodes to the same bytes. */
#include <openssl/sha.h>
#include <stdlib.h>
#include <string.h>

#include "cache/kvimage.h"
#include "cache/sinkcache.h"
#include "session/snapshot.h"
#include "util/errbuf.h"

#define FUZZ_CACHE_MAX ((size_t)8 << 20)

static void exercise(const unsigned char *buf, size_t len)
{
	struct snapshot sn;
	char err[SINKD_ERR_LEN] = "";
	if (snapshot_decode(buf, len, NULL, &sn, err, sizeof(err)) != 0) {
		if (!err[0])
			abort();
		return;
	}
	struct sinkcache *c = NULL;
	if (cache_geometry_bound_bytes(&sn.geom) <= FUZZ_CACHE_MAX &&
	    sinkcache_new(&sn.geom, &c, err, sizeof(err)) == 0) {
		if (sinkcache_import(c, &sn.kv, err, sizeof(err)) != 0)
			abort(); /* decode checked everything import checks */
		struct kv_image back;
		if (sinkcache_export(c, &back, err, sizeof(err)) != 0)
			abort();
		struct snapshot again = sn;
		again.kv = back;
		unsigned char *re;
		size_t re_len;
		if (snapshot_encode(&again, &re, &re_len, err, sizeof(err)) != 0 || re_len != len ||
		    memcmp(re, buf, len) != 0)
			abort();
		free(re);
		kv_image_free(&back);
		/* the imported cache takes more tokens (attention is left out:
		 * its kernels are not in the fuzz build) */
		size_t n = (size_t)sn.geom.n_kv_heads * (size_t)sn.geom.head_dim;
		float *kv = calloc(n, sizeof(float));
		if (!kv)
			abort();
		for (size_t i = 0; i < n; i++)
			kv[i] = (float)(i % 7) * 0.25f - 0.5f;
		for (int t = 0; t < 3 && sinkcache_can_append(c, 1); t++)
			for (int l = 0; l < sn.geom.n_layers; l++)
				if (sinkcache_append(c, l, kv, kv, err, sizeof(err)) != 0)
					abort();
		free(kv);
		sinkcache_free(c);
	}
	snapshot_release(&sn);
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	exercise(data, size);
	if (size < SNAPSHOT_HEADER_BYTES + 32)
		return 0;
	unsigned char *copy = malloc(size);
	if (!copy)
		abort();
	memcpy(copy, data, size);
	SHA256(copy, size - 32, copy + size - 32);
	exercise(copy, size);
	free(copy);
	return 0;
}
