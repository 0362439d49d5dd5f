/* Cache traces of the CPU sink cache: what every layer holds, in stream
 * order, with the attention each resident token received in the last step
 * and its moving average.  Collected only while a session asks for it: the
 * attention then writes every head's key weights (as it does for anchors)
 * and observing them costs a pass over heads x resident tokens per layer
 * and token.  What a trace remembers between steps is the shared recorder
 * of cache/tiertrace.h; this file only hands it the CPU layers. */
#include <errno.h>

#include "cache/cachetrace.h"
#include "cache/sinkcache_impl.h"
#include "cache/tiertrace.h"
#include "util/errbuf.h"

int sinkcache_trace_enable(struct sinkcache *c, bool on, char *err, size_t err_len)
{
	return tier_trace_switch(&c->trace, &c->caps_max, c->g.n_layers, on, err, err_len);
}

bool sinkcache_tracing(const struct sinkcache *c)
{
	return c->trace != NULL;
}

void kv_trace_clear(struct sinkcache *c)
{
	tier_trace_clear(c->trace);
}

void kv_trace_revised(struct sinkcache *c)
{
	for (int l = 0; c->trace && l < c->g.n_layers; l++)
		tier_trace_revised(c->trace, l, c->layers[l].t.n_seen);
}

void kv_trace_observe(struct sinkcache *c, int layer, const float *key_weight,
                      const float *learned_weight, int n_heads)
{
	if (!c->trace || layer < 0 || layer >= c->g.n_layers)
		return;
	const struct kv_layer *L = &c->layers[layer];
	tier_trace_observe_learned(c->trace, layer, L->sink_logits ? learned_weight : NULL,
	                           n_heads);
	size_t ld = (size_t)(L->caps.sink + L->caps.anchor + L->caps.window);
	tier_trace_observe_heads(c->trace, &L->caps, layer, &L->t, &L->anc, key_weight, n_heads,
	                         ld);
}

int sinkcache_trace_fill(const struct sinkcache *c, struct cache_trace_step *out, char *err,
                         size_t err_len)
{
	if (out->n_layers != c->g.n_layers || !out->layers)
		return err_set(err, err_len, -EINVAL,
		               "cache trace: %d layers given for a cache of %d", out->n_layers,
		               c->g.n_layers);
	tier_trace_fill_step(c->trace, &c->g, c->layers[0].t.n_seen, out);
	for (int l = 0; l < c->g.n_layers; l++) {
		tier_trace_fill_layer(c->trace, &c->g, &c->layers[l].caps, l, &c->layers[l].t,
		                      &c->layers[l].anc, c->prefix ? c->layers[l].caps.sink : 0,
		                      out->attention, &out->layers[l]);
		out->layers[l].learned_sink = c->layers[l].sink_logits != NULL;
	}
	return 0;
}
