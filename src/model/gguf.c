/* GGUF reader: maps a GGUF v2/v3 file read-only and validates every byte
 * that any accessor will later look at: header, each metadata key and value
 * (string and array lengths, element types), each tensor's name, shape, type
 * and data range.  Counts read from the file are bounded by the bytes left in
 * it before anything is allocated, and tables grow only as entries really
 * parse, so a hostile file cannot ask for a huge allocation.  It does not
 * interpret the model (see model.c) and it never writes (see gguf_write.c). */
#include "model/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>


#include "util/errbuf.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY_LEN 65535
#define GGUF_MAX_NAME_LEN 256
#define GGUF_MAX_ALIGNMENT (1u << 30)

/* ------------------------------------------------------------------------
 * Element types: block size and bytes per block, as in ggml. */

struct type_traits {
	const char *name;
	uint32_t block_size; /* elements per block; 0 = unknown type */
	uint32_t type_size;  /* bytes per block */
};

static const struct type_traits type_table[GGML_TYPE_COUNT] = {
    [0] = {"F32", 1, 4},         [1] = {"F16", 1, 2},         [2] = {"Q4_0", 32, 18},
    [3] = {"Q4_1", 32, 20},      [6] = {"Q5_0", 32, 22},      [7] = {"Q5_1", 32, 24},
    [8] = {"Q8_0", 32, 34},      [9] = {"Q8_1", 32, 36},      [10] = {"Q2_K", 256, 84},
    [11] = {"Q3_K", 256, 110},   [12] = {"Q4_K", 256, 144},   [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},   [15] = {"Q8_K", 256, 292},   [16] = {"IQ2_XXS", 256, 66},
    [17] = {"IQ2_XS", 256, 74},  [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50},
    [20] = {"IQ4_NL", 32, 18},   [21] = {"IQ3_S", 256, 110},  [22] = {"IQ2_S", 256, 82},
    [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},         [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},        [27] = {"I64", 1, 8},        [28] = {"F64", 1, 8},
    [29] = {"IQ1_M", 256, 56},   [30] = {"BF16", 1, 2},       [34] = {"TQ1_0", 256, 54},
    [35] = {"TQ2_0", 256, 66},   [39] = {"MXFP4", 32, 17},
};

static const struct type_traits *type_traits_of(enum ggml_type type)
{
	if ((unsigned)type >= GGML_TYPE_COUNT || type_table[type].block_size == 0)
		return NULL;
	return &type_table[type];
}

const char *ggml_type_name(enum ggml_type type)
{
	const struct type_traits *t = type_traits_of(type);
	return t ? t->name : "unknown";
}

size_t ggml_row_bytes(enum ggml_type type, uint64_t n)
{
	const struct type_traits *t = type_traits_of(type);
	if (t == NULL || n % t->block_size != 0)
		return 0;
	uint64_t blocks = n / t->block_size;
	if (blocks > SIZE_MAX / t->type_size)
		return 0;
	return (size_t)(blocks * t->type_size);
}

uint32_t ggml_block_size(enum ggml_type type)
{
	const struct type_traits *t = type_traits_of(type);
	return t ? t->block_size : 0;
}

/* Metadata scalar sizes; 0 for string/array (variable) and unknown. */
static size_t value_size(enum gguf_value_type t)
{
	static const uint8_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
	return (unsigned)t < sizeof(sizes) ? sizes[t] : 0;
}

static bool value_type_valid(uint32_t t)
{
	return t <= GGUF_VALUE_FLOAT64;
}

const char *gguf_value_type_name(enum gguf_value_type t)
{
	static const char *const names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
	                                    "int32",  "float32", "bool",   "string", "array",
	                                    "uint64", "int64",   "float64"};
	return value_type_valid((uint32_t)t) ? names[t] : "unknown";
}

/* ------------------------------------------------------------------------
 * The opened file. */

struct gguf_kv {
	char *key; /* NUL-terminated copy */
	enum gguf_value_type type;
	size_t val_off; /* value bytes in the mapping (after the type field) */
	size_t val_len;
	enum gguf_value_type elem_type; /* arrays only */
	uint64_t count;                 /* arrays only */
	size_t elem_off;                /* arrays only: first element */
	uint64_t *str_off;              /* string arrays: (count) offsets of each length field */
};

/* Open-addressing hash from name to index+1 (0 = empty slot), kept at most
 * half full. */
struct name_index {
	size_t *slots; /* (mask + 1) */
	size_t mask;
	size_t count;
};

struct gguf_file {
	char *path;
	const uint8_t *map; /* (size) */
	size_t size;
	uint32_t version;
	size_t alignment;
	size_t data_off;
	struct gguf_kv *kvs; /* (n_kv) */
	size_t n_kv, cap_kv;
	struct gguf_tensor *tensors; /* (n_tensors) */
	size_t n_tensors, cap_tensors;
	struct name_index kv_index;
	struct name_index tensor_index;
};

static uint64_t hash_name(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* Finds the slot of `name`, or the empty slot where it would go. */
static size_t *name_index_slot(const struct name_index *ix, const char *name,
                               const char *(*name_of)(const void *, size_t), const void *ctx)
{
	size_t i = hash_name(name) & ix->mask;
	while (ix->slots[i] != 0 && strcmp(name_of(ctx, ix->slots[i] - 1), name) != 0)
		i = (i + 1) & ix->mask;
	return &ix->slots[i];
}

static const char *kv_name_of(const void *ctx, size_t i)
{
	return ((const struct gguf_file *)ctx)->kvs[i].key;
}

static const char *tensor_name_of(const void *ctx, size_t i)
{
	return ((const struct gguf_file *)ctx)->tensors[i].name;
}

/* Doubles the slot table (16 at first) and re-inserts every entry. */
static int name_index_grow(struct name_index *ix, const char *(*name_of)(const void *, size_t),
                           const void *ctx)
{
	size_t old_cap = ix->slots ? ix->mask + 1 : 0, cap = old_cap ? 2 * old_cap : 16;
	size_t *old = ix->slots;
	if ((ix->slots = calloc(cap, sizeof(*ix->slots))) == NULL) {
		ix->slots = old;
		return -ENOMEM;
	}
	ix->mask = cap - 1;
	for (size_t j = 0; j < old_cap; j++)
		if (old[j] != 0)
			*name_index_slot(ix, name_of(ctx, old[j] - 1), name_of, ctx) = old[j];
	free(old);
	return 0;
}

/* Adds entry i under its name; -EEXIST when the name is already there. */
static int name_index_add(struct name_index *ix, size_t i,
                          const char *(*name_of)(const void *, size_t), const void *ctx)
{
	if (ix->slots == NULL || 2 * (ix->count + 1) > ix->mask + 1) {
		int rc = name_index_grow(ix, name_of, ctx);
		if (rc)
			return rc;
	}
	size_t *slot = name_index_slot(ix, name_of(ctx, i), name_of, ctx);
	if (*slot != 0)
		return -EEXIST;
	*slot = i + 1;
	ix->count++;
	return 0;
}

/* Makes room for entry n of an array of `elem`-byte entries (new ones zeroed),
 * doubling it, so tables only grow as entries really parse. */
static int grow_array(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t new_cap = *cap ? 2 * *cap : 64;
	void *p = realloc(*arr, new_cap * elem);
	if (p == NULL)
		return -ENOMEM;
	memset((char *)p + *cap * elem, 0, (new_cap - *cap) * elem);
	*arr = p;
	*cap = new_cap;
	return 0;
}

/* ------------------------------------------------------------------------
 * Parsing: a bounds-checked cursor over the mapping. */

struct cursor {
	const uint8_t *p;
	size_t size;
	size_t pos;
	const char *path;
	char *err;
	size_t err_len;
};

static size_t cur_left(const struct cursor *c)
{
	return c->size - c->pos;
}

static int cur_read(struct cursor *c, void *out, size_t n, const char *what)
{
	if (n > cur_left(c)) {
		memset(out, 0, n); /* callers' outputs are always defined */
		err_set(c->err, c->err_len, -EINVAL,
		        "%s: truncated: %s at offset %zu needs %zu bytes, file size %zu", c->path,
		        what, c->pos, n, c->size);
		return -EINVAL;
	}
	memcpy(out, c->p + c->pos, n);
	c->pos += n;
	return 0;
}

static int cur_u32(struct cursor *c, uint32_t *v, const char *what)
{
	return cur_read(c, v, 4, what);
}

static int cur_u64(struct cursor *c, uint64_t *v, const char *what)
{
	return cur_read(c, v, 8, what);
}

/* Reads a GGUF string header and skips its bytes; *off is where they start. */
static int cur_string(struct cursor *c, size_t *off, uint64_t *len, const char *what)
{
	*off = 0;
	int rc = cur_u64(c, len, what);
	if (rc)
		return rc;
	if (*len > cur_left(c))
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: %s at offset %zu: length %" PRIu64
		               " extends past end of file (size %zu)",
		               c->path, what, c->pos - 8, *len, c->size);
	*off = c->pos;
	c->pos += (size_t)*len;
	return 0;
}

/* Copies a name (key or tensor name) out of the mapping, rejecting empty,
 * over-long and NUL-containing ones. */
static int copy_name(struct cursor *c, size_t off, uint64_t len, uint64_t max, const char *what,
                     char **out)
{
	if (len == 0 || len > max)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: %s at offset %zu has length %" PRIu64 " (must be 1..%" PRIu64
		               ")",
		               c->path, what, off, len, max);
	if (memchr(c->p + off, '\0', (size_t)len) != NULL)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: %s at offset %zu contains a NUL byte", c->path, what, off);
	*out = strndup((const char *)c->p + off, (size_t)len);
	return *out ? 0 : -ENOMEM;
}

static int check_bools(struct cursor *c, size_t off, uint64_t n, const char *key)
{
	for (uint64_t i = 0; i < n; i++)
		if (c->p[off + i] > 1)
			return err_set(c->err, c->err_len, -EINVAL,
			               "%s: key '%s': bool value %u at offset %" PRIu64
			               " is neither 0 nor 1",
			               c->path, key, c->p[off + i], (uint64_t)off + i);
	return 0;
}

static int parse_string_array(struct cursor *c, struct gguf_kv *kv)
{
	if (kv->count > cur_left(c) / 8)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: key '%s': string array count %" PRIu64
		               " cannot fit in the %zu bytes left in the file",
		               c->path, kv->key, kv->count, cur_left(c));
	kv->str_off = malloc((size_t)(kv->count ? kv->count : 1) * sizeof(uint64_t));
	if (kv->str_off == NULL)
		return -ENOMEM;
	for (uint64_t i = 0; i < kv->count; i++) {
		size_t off;
		uint64_t len;
		kv->str_off[i] = c->pos;
		int rc = cur_string(c, &off, &len, "string array element");
		if (rc) {
			err_set(c->err, c->err_len, rc,
			        "%s: key '%s': element %" PRIu64
			        ": string length extends past end of file (size %zu)",
			        c->path, kv->key, i, c->size);
			return rc;
		}
	}
	return 0;
}

static int parse_array(struct cursor *c, struct gguf_kv *kv)
{
	uint32_t et;
	int rc = cur_u32(c, &et, "array element type");
	if (rc == 0)
		rc = cur_u64(c, &kv->count, "array length");
	if (rc)
		return rc;
	if (et == GGUF_VALUE_ARRAY)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: key '%s': nested arrays are not supported", c->path, kv->key);
	if (!value_type_valid(et))
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: key '%s': unknown array element type %" PRIu32, c->path,
		               kv->key, et);
	kv->elem_type = (enum gguf_value_type)et;
	kv->elem_off = c->pos;
	if (et == GGUF_VALUE_STRING)
		return parse_string_array(c, kv);
	size_t es = value_size(kv->elem_type);
	if (kv->count > cur_left(c) / es)
		return err_set(
		    c->err, c->err_len, -EINVAL,
		    "%s: key '%s': array of %" PRIu64 " %s extends past end of file (size %zu)",
		    c->path, kv->key, kv->count, gguf_value_type_name(kv->elem_type), c->size);
	if (et == GGUF_VALUE_BOOL && (rc = check_bools(c, c->pos, kv->count, kv->key)))
		return rc;
	c->pos += (size_t)kv->count * es;
	return 0;
}

static int parse_value(struct cursor *c, struct gguf_kv *kv)
{
	uint32_t t;
	int rc = cur_u32(c, &t, "value type");
	if (rc)
		return rc;
	if (!value_type_valid(t))
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: key '%s': unknown value type %" PRIu32, c->path, kv->key, t);
	kv->type = (enum gguf_value_type)t;
	kv->val_off = c->pos;
	if (t == GGUF_VALUE_STRING) {
		size_t off;
		uint64_t len;
		rc = cur_string(c, &off, &len, "string value");
	} else if (t == GGUF_VALUE_ARRAY) {
		rc = parse_array(c, kv);
	} else {
		size_t n = value_size(kv->type);
		if (n > cur_left(c))
			return err_set(c->err, c->err_len, -EINVAL,
			               "%s: key '%s': value extends past end of file (size %zu)",
			               c->path, kv->key, c->size);
		if (t == GGUF_VALUE_BOOL && (rc = check_bools(c, c->pos, 1, kv->key)))
			return rc;
		c->pos += n;
	}
	kv->val_len = c->pos - kv->val_off;
	return rc;
}

static int parse_kvs(struct cursor *c, struct gguf_file *f, uint64_t n_kv)
{
	/* A key-value pair takes at least 8 (key length) + 1 (key) + 4 (type) + 1 bytes. */
	if (n_kv > cur_left(c) / 14)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: metadata count %" PRIu64 " cannot fit in a file of %zu bytes",
		               c->path, n_kv, c->size);
	int rc = 0;
	for (uint64_t i = 0; rc == 0 && i < n_kv; i++) {
		if ((rc = grow_array((void **)&f->kvs, &f->cap_kv, (size_t)i, sizeof(*f->kvs))))
			break;
		struct gguf_kv *kv = &f->kvs[i];
		size_t off;
		uint64_t len;
		rc = cur_string(c, &off, &len, "metadata key");
		if (rc == 0)
			rc = copy_name(c, off, len, GGUF_MAX_KEY_LEN, "metadata key", &kv->key);
		if (rc)
			break;
		f->n_kv = (size_t)i + 1;
		rc = name_index_add(&f->kv_index, (size_t)i, kv_name_of, f);
		if (rc == -EEXIST)
			return err_set(c->err, c->err_len, -EINVAL,
			               "%s: duplicate metadata key '%s'", c->path, kv->key);
		if (rc == 0)
			rc = parse_value(c, kv);
	}
	return rc;
}

static int parse_alignment(struct cursor *c, struct gguf_file *f)
{
	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	if (!gguf_has_key(f, "general.alignment"))
		return 0;
	int64_t a;
	if (gguf_get_int(f, "general.alignment", &a) != 0)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: general.alignment is not an integer", c->path);
	if (a <= 0 || a > GGUF_MAX_ALIGNMENT || (a & (a - 1)) != 0)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: general.alignment %" PRId64 " is not a power of two in 1..%u",
		               c->path, a, GGUF_MAX_ALIGNMENT);
	f->alignment = (size_t)a;
	return 0;
}

/* Shape and type of one tensor (n_dims already checked); sets n_elements
 * and n_bytes. */
static int check_tensor_shape(struct cursor *c, struct gguf_tensor *t, uint32_t type)
{
	const struct type_traits *tt = type_traits_of((enum ggml_type)type);
	if (tt == NULL)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s': unknown type %" PRIu32, c->path, t->name, type);
	t->type = (enum ggml_type)type;
	uint64_t n = 1;
	for (uint32_t d = 0; d < t->n_dims; d++) {
		if (t->dims[d] == 0 || t->dims[d] > (uint64_t)INT64_MAX / n)
			return err_set(c->err, c->err_len, -EINVAL,
			               "%s: tensor '%s': dimension %" PRIu32 " is %" PRIu64
			               " (zero, or the element count overflows)",
			               c->path, t->name, d, t->dims[d]);
		n *= t->dims[d];
	}
	for (uint32_t d = t->n_dims; d < GGUF_MAX_DIMS; d++)
		t->dims[d] = 1;
	t->n_elements = n;
	size_t row = ggml_row_bytes(t->type, t->dims[0]);
	uint64_t rows = n / t->dims[0];
	if (row == 0 || rows > SIZE_MAX / row)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s': row of %" PRIu64
		               " elements is not a whole number of %s blocks (%" PRIu32
		               " elements), or the size overflows",
		               c->path, t->name, t->dims[0], tt->name, tt->block_size);
	t->n_bytes = rows * row;
	return 0;
}

/* Reads one tensor info; t->data temporarily holds the relative offset. */
static int parse_tensor_info(struct cursor *c, struct gguf_tensor *t, uint64_t *rel_off)
{
	size_t off;
	uint64_t len;
	uint32_t type;
	char *name = NULL;
	int rc = cur_string(c, &off, &len, "tensor name");
	if (rc == 0)
		rc = copy_name(c, off, len, GGUF_MAX_NAME_LEN, "tensor name", &name);
	if (rc)
		return rc;
	t->name = name;
	rc = cur_u32(c, &t->n_dims, "tensor dimension count");
	if (rc == 0 && (t->n_dims == 0 || t->n_dims > GGUF_MAX_DIMS))
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s': %" PRIu32 " dimensions (must be 1..%d)", c->path,
		               t->name, t->n_dims, GGUF_MAX_DIMS);
	for (uint32_t d = 0; rc == 0 && d < t->n_dims; d++)
		rc = cur_u64(c, &t->dims[d], "tensor dimension");
	if (rc == 0)
		rc = cur_u32(c, &type, "tensor type");
	if (rc == 0)
		rc = cur_u64(c, rel_off, "tensor offset");
	if (rc == 0)
		rc = check_tensor_shape(c, t, type);
	return rc;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static int place_tensor(struct cursor *c, struct gguf_file *f, struct gguf_tensor *t, uint64_t rel)
{
	if (rel % f->alignment != 0)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s': offset %" PRIu64
		               " is not a multiple of the alignment %zu",
		               c->path, t->name, rel, f->alignment);
	uint64_t avail = f->size - f->data_off;
	if (rel > avail || t->n_bytes > avail - rel)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor '%s': data [%" PRIu64 ", %" PRIu64
		               ") extends past end of file (size %zu)",
		               c->path, t->name, sat_add(f->data_off, rel),
		               sat_add(sat_add(f->data_off, rel), t->n_bytes), f->size);
	t->data = f->map + f->data_off + rel;
	return 0;
}

static int parse_tensors(struct cursor *c, struct gguf_file *f, uint64_t n_tensors)
{
	/* A tensor info takes at least 8 + 1 (name) + 4 + 8 (one dim) + 4 + 8 bytes. */
	if (n_tensors > cur_left(c) / 33)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: tensor count %" PRIu64 " cannot fit in a file of %zu bytes",
		               c->path, n_tensors, c->size);
	uint64_t *rel = NULL; /* (n_tensors) offsets relative to the data section */
	size_t cap_rel = 0;
	int rc = 0;
	for (uint64_t i = 0; rc == 0 && i < n_tensors; i++) {
		rc = grow_array((void **)&f->tensors, &f->cap_tensors, (size_t)i,
		                sizeof(*f->tensors));
		if (rc == 0)
			rc = grow_array((void **)&rel, &cap_rel, (size_t)i, sizeof(*rel));
		if (rc)
			break;
		struct gguf_tensor *t = &f->tensors[i];
		rc = parse_tensor_info(c, t, &rel[i]);
		if (t->name)
			f->n_tensors = (size_t)i + 1;
		if (rc)
			break;
		rc = name_index_add(&f->tensor_index, (size_t)i, tensor_name_of, f);
		if (rc == -EEXIST)
			rc = err_set(c->err, c->err_len, -EINVAL, "%s: duplicate tensor name '%s'",
			             c->path, t->name);
	}
	if (rc == 0) {
		size_t pad = (f->alignment - c->pos % f->alignment) % f->alignment;
		f->data_off = c->pos + pad;
		if (n_tensors > 0 && pad > cur_left(c))
			rc = err_set(c->err, c->err_len, -EINVAL,
			             "%s: tensor data section at offset %zu extends past end of "
			             "file (size %zu)",
			             c->path, f->data_off, c->size);
	}
	for (uint64_t i = 0; rc == 0 && i < n_tensors; i++)
		rc = place_tensor(c, f, &f->tensors[i], rel[i]);
	free(rel);
	return rc;
}

static int parse_header(struct cursor *c, struct gguf_file *f, uint64_t *n_tensors, uint64_t *n_kv)
{
	char magic[4];
	int rc = cur_read(c, magic, 4, "magic");
	if (rc)
		return rc;
	if (memcmp(magic, GGUF_MAGIC, 4) != 0)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: not a GGUF file (magic is not \"GGUF\")", c->path);
	if ((rc = cur_u32(c, &f->version, "version")))
		return rc;
	if (f->version == 1)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: GGUF version 1 is not supported (only 2 and 3); re-convert the "
		               "model with a current llama.cpp",
		               c->path);
	if (f->version == 0x02000000u || f->version == 0x03000000u)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: big-endian GGUF files are not supported", c->path);
	if (f->version != 2 && f->version != 3)
		return err_set(c->err, c->err_len, -EINVAL,
		               "%s: unsupported GGUF version %" PRIu32 " (supported: 2, 3)",
		               c->path, f->version);
	rc = cur_u64(c, n_tensors, "tensor count");
	if (rc == 0)
		rc = cur_u64(c, n_kv, "metadata count");
	return rc;
}

static int map_file(const char *path, struct gguf_file *f, char *err, size_t err_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(err, err_len, -errno, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	int rc = 0;
	if (fstat(fd, &st) != 0) {
		rc = err_set(err, err_len, -errno, "%s: cannot stat: %s", path, strerror(errno));
	} else if (!S_ISREG(st.st_mode)) {
		rc = err_set(err, err_len, -EINVAL, "%s: not a regular file", path);
	} else if (st.st_size < 24) {
		rc = err_set(err, err_len, -EINVAL,
		             "%s: too small to be a GGUF file (%lld bytes, header needs 24)", path,
		             (long long)st.st_size);
	} else if ((uint64_t)st.st_size > SIZE_MAX) {
		rc = err_set(err, err_len, -EFBIG, "%s: too large to map", path);
	} else {
		void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED)
			rc = err_set(err, err_len, -errno, "%s: cannot map: %s", path,
			             strerror(errno));
		else {
			f->map = m;
			f->size = (size_t)st.st_size;
		}
	}
	close(fd);
	return rc;
}

int gguf_open(const char *path, struct gguf_file **out, char *err, size_t err_len)
{
	*out = NULL;
	struct gguf_file *f = calloc(1, sizeof(*f));
	if (f == NULL || (f->path = strdup(path)) == NULL) {
		free(f);
		return err_set(err, err_len, -ENOMEM, "%s: out of memory", path);
	}
	int rc = map_file(path, f, err, err_len);
	if (rc)
		goto out;
	struct cursor c = {
	    .p = f->map, .size = f->size, .path = path, .err = err, .err_len = err_len};
	uint64_t n_tensors = 0, n_kv = 0;
	rc = parse_header(&c, f, &n_tensors, &n_kv);
	if (rc == 0)
		rc = parse_kvs(&c, f, n_kv);
	if (rc == 0)
		rc = parse_alignment(&c, f);
	if (rc == 0)
		rc = parse_tensors(&c, f, n_tensors);
	if (rc == -ENOMEM)
		err_set(err, err_len, rc, "%s: out of memory while reading the file", path);
out:
	if (rc) {
		gguf_close(f);
		return rc;
	}
	*out = f;
	return 0;
}

void gguf_close(struct gguf_file *f)
{
	if (f == NULL)
		return;
	for (size_t i = 0; i < f->n_kv; i++) {
		free(f->kvs[i].key);
		free(f->kvs[i].str_off);
	}
	for (size_t i = 0; i < f->n_tensors; i++)
		free((char *)f->tensors[i].name);
	free(f->kvs);
	free(f->tensors);
	free(f->kv_index.slots);
	free(f->tensor_index.slots);
	if (f->map)
		munmap((void *)f->map, f->size);
	free(f->path);
	free(f);
}

const char *gguf_path(const struct gguf_file *f)
{
	return f->path;
}

uint32_t gguf_version(const struct gguf_file *f)
{
	return f->version;
}

size_t gguf_alignment(const struct gguf_file *f)
{
	return f->alignment;
}

size_t gguf_data_offset(const struct gguf_file *f)
{
	return f->data_off;
}

size_t gguf_file_size(const struct gguf_file *f)
{
	return f->size;
}

const void *gguf_map(const struct gguf_file *f)
{
	return f->map;
}

/* ------------------------------------------------------------------------
 * Metadata accessors. */

static const struct gguf_kv *find_kv(const struct gguf_file *f, const char *key)
{
	if (f->kv_index.slots == NULL || key == NULL)
		return NULL;
	size_t *slot = name_index_slot(&f->kv_index, key, kv_name_of, f);
	return *slot ? &f->kvs[*slot - 1] : NULL;
}

bool gguf_has_key(const struct gguf_file *f, const char *key)
{
	return find_kv(f, key) != NULL;
}

/* Converts a numeric scalar at p to int64 (bool counts as 0/1). */
static int scalar_to_int(enum gguf_value_type t, const uint8_t *p, int64_t *out)
{
	union {
		uint8_t u8;
		int8_t i8;
		uint16_t u16;
		int16_t i16;
		uint32_t u32;
		int32_t i32;
		uint64_t u64;
		int64_t i64;
	} v;
	size_t n = value_size(t);
	if (n == 0 || t == GGUF_VALUE_FLOAT32 || t == GGUF_VALUE_FLOAT64)
		return -EINVAL;
	memcpy(&v, p, n);
	switch (t) {
	case GGUF_VALUE_UINT8:
		*out = v.u8;
		break;
	case GGUF_VALUE_BOOL:
		*out = v.u8;
		break;
	case GGUF_VALUE_INT8:
		*out = v.i8;
		break;
	case GGUF_VALUE_UINT16:
		*out = v.u16;
		break;
	case GGUF_VALUE_INT16:
		*out = v.i16;
		break;
	case GGUF_VALUE_UINT32:
		*out = v.u32;
		break;
	case GGUF_VALUE_INT32:
		*out = v.i32;
		break;
	case GGUF_VALUE_INT64:
		*out = v.i64;
		break;
	case GGUF_VALUE_UINT64:
		if (v.u64 > (uint64_t)INT64_MAX)
			return -EINVAL;
		*out = (int64_t)v.u64;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

static int scalar_to_double(enum gguf_value_type t, const uint8_t *p, double *out)
{
	if (t == GGUF_VALUE_FLOAT32) {
		float v;
		memcpy(&v, p, 4);
		*out = v;
		return 0;
	}
	if (t == GGUF_VALUE_FLOAT64) {
		memcpy(out, p, 8);
		return 0;
	}
	int64_t i;
	if (t == GGUF_VALUE_BOOL || scalar_to_int(t, p, &i) != 0)
		return -EINVAL;
	*out = (double)i;
	return 0;
}

int gguf_get_int(const struct gguf_file *f, const char *key, int64_t *out)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL)
		return -ENOENT;
	if (kv->type == GGUF_VALUE_BOOL)
		return -EINVAL;
	return scalar_to_int(kv->type, f->map + kv->val_off, out);
}

int gguf_get_float(const struct gguf_file *f, const char *key, double *out)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL)
		return -ENOENT;
	return scalar_to_double(kv->type, f->map + kv->val_off, out);
}

int gguf_get_bool(const struct gguf_file *f, const char *key, bool *out)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL)
		return -ENOENT;
	if (kv->type != GGUF_VALUE_BOOL)
		return -EINVAL;
	*out = f->map[kv->val_off] != 0;
	return 0;
}

/* A string stored as u64 length + bytes at offset `off` (already validated). */
static void string_at(const struct gguf_file *f, size_t off, const char **s, size_t *len)
{
	uint64_t n;
	memcpy(&n, f->map + off, 8);
	*s = (const char *)f->map + off + 8;
	*len = (size_t)n;
}

int gguf_get_string(const struct gguf_file *f, const char *key, const char **s, size_t *len)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL)
		return -ENOENT;
	if (kv->type != GGUF_VALUE_STRING)
		return -EINVAL;
	string_at(f, kv->val_off, s, len);
	return 0;
}

int gguf_get_array_info(const struct gguf_file *f, const char *key, enum gguf_value_type *elem_type,
                        uint64_t *count)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL)
		return -ENOENT;
	if (kv->type != GGUF_VALUE_ARRAY)
		return -EINVAL;
	if (elem_type)
		*elem_type = kv->elem_type;
	if (count)
		*count = kv->count;
	return 0;
}

/* The array at key with an element at index; -ERANGE past its end. */
static int array_elem(const struct gguf_file *f, const char *key, uint64_t index,
                      const struct gguf_kv **out)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL)
		return -ENOENT;
	if (kv->type != GGUF_VALUE_ARRAY)
		return -EINVAL;
	if (index >= kv->count)
		return -ERANGE;
	*out = kv;
	return 0;
}

int gguf_get_array_string(const struct gguf_file *f, const char *key, uint64_t index,
                          const char **s, size_t *len)
{
	const struct gguf_kv *kv;
	int rc = array_elem(f, key, index, &kv);
	if (rc)
		return rc;
	if (kv->elem_type != GGUF_VALUE_STRING)
		return -EINVAL;
	string_at(f, (size_t)kv->str_off[index], s, len);
	return 0;
}

/* Element index of the numeric array key: its kv and bytes (-EINVAL for a
 * string array). */
static int numeric_elem(const struct gguf_file *f, const char *key, uint64_t index,
                        const struct gguf_kv **kv, const uint8_t **p)
{
	int rc = array_elem(f, key, index, kv);
	if (rc)
		return rc;
	if ((*kv)->elem_type == GGUF_VALUE_STRING)
		return -EINVAL;
	*p = f->map + (*kv)->elem_off + (size_t)index * value_size((*kv)->elem_type);
	return 0;
}

int gguf_get_array_float(const struct gguf_file *f, const char *key, uint64_t index, double *out)
{
	const struct gguf_kv *kv;
	const uint8_t *p;
	int rc = numeric_elem(f, key, index, &kv, &p);
	return rc ? rc : scalar_to_double(kv->elem_type, p, out);
}

int gguf_get_array_int(const struct gguf_file *f, const char *key, uint64_t index, int64_t *out)
{
	const struct gguf_kv *kv;
	const uint8_t *p;
	int rc = numeric_elem(f, key, index, &kv, &p);
	return rc ? rc : scalar_to_int(kv->elem_type, p, out);
}

const void *gguf_get_array_data(const struct gguf_file *f, const char *key)
{
	const struct gguf_kv *kv = find_kv(f, key);
	if (kv == NULL || kv->type != GGUF_VALUE_ARRAY || kv->elem_type == GGUF_VALUE_STRING)
		return NULL;
	return f->map + kv->elem_off;
}

size_t gguf_n_kv(const struct gguf_file *f)
{
	return f->n_kv;
}

const char *gguf_kv_key(const struct gguf_file *f, size_t index)
{
	return index < f->n_kv ? f->kvs[index].key : NULL;
}

int gguf_kv_raw(const struct gguf_file *f, size_t index, enum gguf_value_type *type,
                const void **data, size_t *len)
{
	if (index >= f->n_kv)
		return -ERANGE;
	*type = f->kvs[index].type;
	*data = f->map + f->kvs[index].val_off;
	*len = f->kvs[index].val_len;
	return 0;
}

/* ------------------------------------------------------------------------
 * Tensors. */

size_t gguf_n_tensors(const struct gguf_file *f)
{
	return f->n_tensors;
}

const struct gguf_tensor *gguf_tensor_at(const struct gguf_file *f, size_t index)
{
	return index < f->n_tensors ? &f->tensors[index] : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name)
{
	if (f->tensor_index.slots == NULL || name == NULL)
		return NULL;
	size_t *slot = name_index_slot(&f->tensor_index, name, tensor_name_of, f);
	return *slot ? &f->tensors[*slot - 1] : NULL;
}
