/* The example programs' backend and device options: `--backend NAME` names a registered backend
 * (cn_backend_list: interp, c and those built in or registered later), checked against the
 * registry with the closest names suggested; without it the examples run on CN_BACKEND_DEFAULT,
 * the context's option "backend" ($CANNL_BACKEND, else generated C); `--devices N` trains data
 * parallel on N CPU devices of that (host) backend. */
#ifndef CANNL_DEMO_BACKEND_H
#define CANNL_DEMO_BACKEND_H

#include "cannl.h"

#include <stdbool.h>

/* The backend called name into *kind; false, with the known names and a suggestion on stderr,
 * for a name the registry does not know. */
bool demo_backend_parse(const char *name, cn_backend_kind *kind);
/* What a run on kind is called in an example's banner: "generated C", "the interpreter", or the
 * backend's registry name; CN_BACKEND_DEFAULT is the option "backend"'s default ($CANNL_BACKEND,
 * else c: an unknown name is shown as it is and refused when the first routine is compiled). */
const char *demo_backend_label(cn_backend_kind kind);
/* `--devices N`: N in [1, CN_MAX_DEVICES] into *devices (N > 1: data parallel on N CPU devices,
 * cn_dp_create); false, with the range on stderr, for anything else. */
bool demo_devices_parse(const char *text, int *devices);

#endif
