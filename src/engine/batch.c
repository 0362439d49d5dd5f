#include "engine/batch.h"

#include <errno.h>

#include "util/errbuf.h"

int batch_plan_make(const struct backend_token *tokens, size_t n, int n_vocab, struct batch_plan *p,
                    char *err, size_t err_len)
{
	p->n_sessions = 0;
	p->longest = 0;
	for (size_t i = 0; i < n; i++) {
		if (!tokens[i].session)
			return err_set(err, err_len, -EINVAL, "batch token %zu has no session", i);
		if (tokens[i].token < 0 || tokens[i].token >= n_vocab)
			return err_set(err, err_len, -EINVAL,
			               "batch token %zu: id %d is outside the vocabulary (0..%d)",
			               i, (int)tokens[i].token, n_vocab - 1);
		*batch_member_of(tokens[i].session) = (struct batch_member){.n = 0, .slot = -1};
	}
	for (size_t i = 0; i < n; i++) {
		struct batch_member *m = batch_member_of(tokens[i].session);
		if (m->slot < 0) {
			m->slot = p->n_sessions;
			p->sessions[p->n_sessions++] = tokens[i].session;
		}
		m->n++;
	}
	p->begin[0] = 0;
	for (int j = 0; j < p->n_sessions; j++) {
		struct batch_member *m = batch_member_of(p->sessions[j]);
		p->begin[j + 1] = p->begin[j] + m->n;
		p->longest = m->n > p->longest ? m->n : p->longest;
		m->n = 0; /* a fill cursor below, its count again after */
	}
	for (size_t i = 0; i < n; i++) {
		struct batch_member *m = batch_member_of(tokens[i].session);
		p->order[p->begin[m->slot] + m->n++] = (int)i;
	}
	return 0;
}
