// SPDX-License-Identifier: MIT
/*
 * transport/rdma_load.c - the core's side of the rdma provider
 * (transport/rdma_provider.h): find libcoord-rdma.so on the first use of
 * rdma, check it is of this build (RP1), keep it loaded (RP2), and forward
 * the rdma entry points the rest of libcoord calls (coord_psr_*() of the
 * ps client, coord_rdma_serve() of the servers) to its table.  The "rdma"
 * entry of coord_transports[] takes the provider's transport ops as they
 * are, so the coordinator's calls into rdma go straight to the provider.
 *
 * Where the provider is: $COORD_RDMA_PROVIDER if set (the build tree's
 * tests set it to the one they built), else where `meson install` put it
 * (COORD_RDMA_PROVIDER_PATH: <libdir>/coord/libcoord-rdma.so).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <coord/version.h>

#include "transport/rdma_provider.h"
#include "transport/rdma_provider_conf.h"
#include "transport/server/srv_proto.h"

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
/*
 * Written once, inside load_once; read after pthread_once() returned
 * (which orders the write before), or by the forwarders below, whose
 * coord_psr came from prov->psr_connect() after the load and reached
 * their thread through the ps client's locks.
 */
static const struct coord_rdma_provider *prov;
static struct coord_error load_err;

/* What to do about a provider that did not load (it fits COORD_ERRMSG_LEN
 * beside the file and dlerror()). */
#if COORD_RDMA_PROVIDER_BUILT
#define LOAD_HINT                                                                                  \
	"needs rdma-core (libibverbs1, librdmacm1); " COORD_RDMA_PROVIDER_ENV " names the file"
#else
#define LOAD_HINT "this coord was built without it: no libibverbs-dev/librdmacm-dev"
#endif

static void load(void)
{
	const char *path = getenv(COORD_RDMA_PROVIDER_ENV);
	const struct coord_rdma_provider *p;
	const char *why;
	void *h;

	if (!path || !*path)
		path = COORD_RDMA_PROVIDER_PATH;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		why = dlerror();
		/* dlerror() names the file when it is the file that is missing. */
		if (why && !strncmp(why, path, strlen(path)))
			coord_seterr(&load_err, -ENODEV, "rdma: cannot load the provider: %s (%s)",
				     why, LOAD_HINT);
		else
			coord_seterr(&load_err, -ENODEV,
				     "rdma: cannot load the provider %s: %s (%s)", path,
				     why ? why : "?", LOAD_HINT);
		return;
	}
	p = dlsym(h, COORD_RDMA_PROVIDER_SYM);
	if (!p) {
		coord_seterr(&load_err, -ENODEV, "rdma: %s is not a coord rdma provider (no %s)",
			     path, COORD_RDMA_PROVIDER_SYM);
	} else if (p->abi != COORD_RDMA_PROVIDER_ABI || !p->version ||
		   strcmp(p->version, COORD_VERSION_STRING) != 0) {
		coord_seterr(&load_err, -ENODEV,
			     "rdma: refusing the provider %s: it is of coord %s (provider ABI %u), "
			     "this libcoord is %s (ABI %u); install the provider of the same build",
			     path, p->version ? p->version : "?", p->abi, COORD_VERSION_STRING,
			     COORD_RDMA_PROVIDER_ABI);
	} else {
		prov = p; /* RP2: never dlclose()d */
		coord_log(COORD_LOG_INFO, "rdma: provider %s", path);
		return;
	}
	dlclose(h);
}

int coord_rdma_load(const struct coord_rdma_provider **out, struct coord_error *err)
{
	pthread_once(&load_once, load);
	*out = prov;
	if (prov)
		return 0;
	if (err)
		*err = load_err;
	return load_err.code;
}

int coord_rdma_tp_load(const struct coord_tp_ops **tp, struct coord_error *err)
{
	const struct coord_rdma_provider *p;
	int r = coord_rdma_load(&p, err);

	*tp = r == 0 ? p->tp : NULL;
	return r;
}

int coord_rdma_usable(struct coord_error *err)
{
	const struct coord_rdma_provider *p;
	int r = coord_rdma_load(&p, err);

	return r == 0 ? p->available(err) : r;
}

int coord_rdma_serve(struct coord_srv *s, struct coord_error *err)
{
	const struct coord_rdma_provider *p;
	int r = coord_rdma_load(&p, err);

	return r == 0 ? p->serve(s, err) : r;
}

/* ---- transport/rdma/ps_rdma.h, forwarded ------------------------------------------- */

int coord_psr_connect(const char *addr, const struct coord_key *key, uint8_t role, unsigned task,
		      uint32_t max_frame, int timeout_ms, struct coord_psr **out,
		      struct coord_error *err)
{
	const struct coord_rdma_provider *p;
	int r = coord_rdma_load(&p, err);

	*out = NULL;
	return r == 0 ? p->psr_connect(addr, key, role, task, max_frame, timeout_ms, out, err) : r;
}

/* The rest take a channel psr_connect() made: the provider is loaded. */
int coord_psr_send(struct coord_psr *r, const void *buf, size_t len)
{
	return r ? prov->psr_send(r, buf, len) : -EPIPE;
}

int coord_psr_send_some(struct coord_psr *r, const void *buf, size_t len, size_t *sent)
{
	*sent = 0;
	return r ? prov->psr_send_some(r, buf, len, sent) : -EPIPE;
}

uint64_t coord_psr_rx(struct coord_psr *r)
{
	return r ? prov->psr_rx(r) : 0;
}

int coord_psr_next(struct coord_psr *r, struct coord_wire_hdr *h, const uint8_t **payload,
		   int wait_ms)
{
	return r ? prov->psr_next(r, h, payload, wait_ms) : -EPIPE;
}

int coord_psr_read_var(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off, uint64_t n,
		       void *dst, unsigned *tries)
{
	*tries = 0;
	return r ? prov->psr_read_var(r, m, off, n, dst, tries) : -EPIPE;
}

int coord_psr_put_reg(struct coord_psr *r, const void *src, size_t len, struct coord_rdma_mr **out,
		      struct coord_ps_rsrc *d)
{
	*out = NULL;
	return r ? prov->psr_put_reg(r, src, len, out, d) : -EPIPE;
}

void coord_psr_put_done(struct coord_rdma_mr *mr)
{
	if (mr)
		prov->psr_put_done(mr);
}

void coord_psr_shutdown(struct coord_psr *r)
{
	if (r)
		prov->psr_shutdown(r);
}

void coord_psr_destroy(struct coord_psr *r)
{
	if (r)
		prov->psr_destroy(r);
}
