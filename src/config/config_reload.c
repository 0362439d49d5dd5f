/* The reload transaction (Redis config.c and nginx style): compares the
 * running config with the new one key by key through the table, keeps the
 * running value of every restart-only key, prepares each subsystem that a
 * changed key names and commits all of them or none.  It does not read
 * files or log: the daemon loads the file before and logs the result. */
#include "config/config_reload.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_table.h"
#include "util/errbuf.h"

#define VALUE_LEN 2048

void config_reload_result_deinit(struct config_reload_result *r)
{
	if (!r)
		return;
	for (size_t i = 0; i < r->n_changed; i++) {
		free(r->changed[i].old_value);
		free(r->changed[i].new_value);
	}
	for (size_t i = 0; i < r->n_pending; i++) {
		free(r->pending[i].old_value);
		free(r->pending[i].new_value);
	}
	free(r->changed);
	free(r->pending);
	memset(r, 0, sizeof(*r));
}

static int change_push(struct config_change **list, size_t *n, const char *key, const char *a,
                       const char *b)
{
	struct config_change *grown = realloc(*list, (*n + 1) * sizeof(*grown));
	if (!grown)
		return -ENOMEM;
	*list = grown;
	struct config_change *c = &grown[*n];
	c->key = key;
	c->old_value = strdup(a);
	c->new_value = strdup(b);
	if (!c->old_value || !c->new_value) {
		free(c->old_value);
		free(c->new_value);
		return -ENOMEM;
	}
	(*n)++;
	return 0;
}

/* Fills res and the set of subsystems to prepare; restart-only keys of next
 * take the running values. */
static int diff_keys(const struct sinkd_config *cur, struct sinkd_config *next,
                     struct config_reload_result *res, unsigned *appliers)
{
	char *a = malloc(VALUE_LEN), *b = malloc(VALUE_LEN);
	char *ma = malloc(VALUE_LEN), *mb = malloc(VALUE_LEN);
	int rc = a && b && ma && mb ? 0 : -ENOMEM;
	for (size_t i = 0; !rc && i < config_n_keys; i++) {
		const struct config_key *k = &config_keys[i];
		config_format_value(cur, k, 0, a, VALUE_LEN);
		config_format_value(next, k, 0, b, VALUE_LEN);
		if (!strcmp(a, b))
			continue;
		config_format_value(cur, k, 1, ma, VALUE_LEN);
		config_format_value(next, k, 1, mb, VALUE_LEN);
		if (k->apply == 0) {
			rc = change_push(&res->pending, &res->n_pending, k->path, ma, mb);
			if (!rc)
				rc = config_copy_value(next, cur, k);
			continue;
		}
		*appliers |= k->apply;
		rc = change_push(&res->changed, &res->n_changed, k->path, ma, mb);
	}
	free(a);
	free(b);
	free(ma);
	free(mb);
	return rc;
}

int config_reload_apply(const struct sinkd_config *cur, struct sinkd_config *next,
                        const struct config_applier_ops *const ops[CONFIG_N_APPLIERS],
                        struct config_reload_result *res, char *err, size_t err_len)
{
	void *prepared[CONFIG_N_APPLIERS] = {0};
	bool ready[CONFIG_N_APPLIERS] = {0};
	unsigned appliers = 0;
	memset(res, 0, sizeof(*res));
	int rc = diff_keys(cur, next, res, &appliers);
	if (rc)
		return err_set(err, err_len, rc, "out of memory");
	for (int i = 0; i < CONFIG_N_APPLIERS; i++) {
		const struct config_applier_ops *op = ops[i];
		if (!op || !op->prepare || (!op->every_reload && !(appliers & CONFIG_APPLIES(i))))
			continue;
		rc = op->prepare(op->ctx, next, &prepared[i], err, err_len);
		if (rc) {
			err_prefix(err, err_len, op->name);
			goto discard;
		}
		ready[i] = true;
	}
	for (int i = 0; i < CONFIG_N_APPLIERS; i++)
		if (ready[i] && ops[i]->commit)
			ops[i]->commit(ops[i]->ctx, next, prepared[i]);
	return 0;
discard:
	for (int i = 0; i < CONFIG_N_APPLIERS; i++)
		if (ready[i] && ops[i]->discard)
			ops[i]->discard(ops[i]->ctx, prepared[i]);
	return rc;
}
