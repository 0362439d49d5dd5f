/* What every backend checks of a session's cache geometry (backend.h). */
#include "engine/backend.h"

#include <errno.h>

#include "model/model.h"
#include "util/errbuf.h"

int backend_geometry_fits_model(const struct model *m, const struct cache_geometry *g,
                                char *err, size_t err_len)
{
	const struct model_hparams *hp = &m->hp;
	if (g->n_layers != hp->n_layers || g->n_kv_heads != hp->n_kv_heads ||
	    g->head_dim != hp->head_dim)
		return err_set(
		    err, err_len, -EINVAL,
		    "cache geometry (%d layers, %d kv heads, head_dim %d) does not match "
		    "the model (%d, %d, %d)",
		    g->n_layers, g->n_kv_heads, g->head_dim, hp->n_layers, hp->n_kv_heads,
		    hp->head_dim);
	if (g->rope_dim != hp->rope_dim)
		return err_set(err, err_len, -EINVAL,
		               "cache geometry: rope_dim %d does not match the model (%d)",
		               g->rope_dim, hp->rope_dim);
	return 0;
}
