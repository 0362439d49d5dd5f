/* What every backend checks of a session's cache geometry (backend.h). */
#include "engine/backend.h"

#include "model/model.h"

int backend_geometry_fits_model(const struct model *m, const struct cache_geometry *g,
                                char *err, size_t err_len)
{
	return cache_geometry_fits_model(g, &m->hp, err, err_len);
}
