/* The backend interface (issue 32): a backend is one registration. The test registers "counting"
 * (counting_backend.h), a wrapper of the interpreter whose device has memory of its own, and
 * runs the end-to-end cases of tests/e2e_cases.h on it after the interpreter: every result the
 * hand-worked value and the interpreter's bits. Its counters say each run went through it (one
 * compile, one run per case; a synchronize per run and per download) and every device buffer
 * was freed. Also: listing
 * and lookup by name, capabilities (tunable only for generated C), refused registrations, an
 * unknown kind, and a script run on the registered backend. */
#include "counting_backend.h"
#include "e2e_cases.h"

#include <stdio.h>

/* The built-in backends before any registration. */
static void test_builtins(void) {
  CHECK_INT(cn_backend_count(), 4);
  CHECK_INT(cn_backend_find("interp"), CN_BACKEND_INTERP);
  CHECK_INT(cn_backend_find("c"), CN_BACKEND_C);
  CHECK_INT(cn_backend_find("counting"), -1);
  CHECK_INT(cn_backend_find(NULL), -1);
  CHECK_STR(cn_backend_name(CN_BACKEND_C), "c");
  CHECK_STR(cn_backend_name((cn_backend_kind)2), "opencl");
  CHECK_STR(cn_backend_name((cn_backend_kind)3), "cuda");
  CHECK(cn_backend_name((cn_backend_kind)4) == NULL);
  CHECK_STR(cn_backend_list(), "interp, c, opencl, cuda");
  CHECK_INT(cn_backend_caps((cn_backend_kind)3), CN_BACKEND_DEVICE_MEMORY | CN_BACKEND_COMPILED);
  CHECK_INT(cn_backend_caps(CN_BACKEND_INTERP), 0);
  CHECK_INT(cn_backend_caps(CN_BACKEND_C),
            CN_BACKEND_TUNABLE | CN_BACKEND_PARALLEL | CN_BACKEND_COMPILED);
  CHECK_INT(cn_backend_caps((cn_backend_kind)2), CN_BACKEND_DEVICE_MEMORY | CN_BACKEND_COMPILED);
  CHECK_INT(cn_backend_caps((cn_backend_kind)7), 0);
}

/* Registers `counting` (and refuses what cannot be registered); its id. */
static cn_backend_kind test_register(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_backend_kind kind = CN_BACKEND_INTERP;
  CHECK_MSG(cn_backend_register(ctx, &counting, &kind) == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_INT(kind, 4);
  CHECK_INT(cn_backend_count(), 5);
  CHECK_INT(cn_backend_find("counting"), 4);
  CHECK_STR(cn_backend_name(kind), "counting");
  CHECK_STR(cn_backend_list(), "interp, c, opencl, cuda, counting");
  char hint[128];
  CHECK_STR(cn_backend_suggest("countng", hint, sizeof hint), ", did you mean 'counting'?");
  CHECK_STR(cn_backend_suggest("opencll", hint, sizeof hint), ", did you mean 'opencl'?");
  CHECK_STR(cn_backend_suggest("vulkan", hint, sizeof hint), "");
  CHECK_STR(cn_backend_suggest("cudaa", hint, 8), ", did y");
  CHECK_INT(cn_backend_caps(kind), CN_BACKEND_DEVICE_MEMORY);
  CHECK(!(cn_backend_caps(kind) & CN_BACKEND_TUNABLE));

  cn_backend_kind unused;
  CHECK(cn_backend_register(ctx, &counting, &unused) == CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "backend 'counting' cannot be registered: the name is taken");
  cn_backend bad = counting;
  bad.name = "Bad name";
  CHECK(cn_backend_register(ctx, &bad, &unused) == CN_ERR_INVALID);
  CHECK_STR(cn_ctx_error(ctx), "backend 'Bad name' cannot be registered: its name is not a "
                               "lowercase identifier of at most 31 characters");
  bad.name = "nodevice";
  bad.open_device = NULL;
  CHECK(cn_backend_register(ctx, &bad, &unused) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "CN_BACKEND_DEVICE_MEMORY and open_device disagree");
  bad = counting;
  bad.name = "norun";
  bad.run = NULL;
  CHECK(cn_backend_register(ctx, &bad, &unused) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "compile, run or release is missing");
  bad = counting;
  bad.name = "parallel";
  bad.caps |= CN_BACKEND_PARALLEL;
  CHECK(cn_backend_register(ctx, &bad, &unused) == CN_ERR_INVALID);
  CHECK_HAS(cn_ctx_error(ctx), "CN_BACKEND_PARALLEL and run_parallel disagree");
  CHECK_INT(cn_backend_count(), 5); /* nothing refused was added */
  /* a kind nobody registered: the message names it */
  cn_node *n = cn_node_create(ctx, "n", CN_PREC_SINGLE, 1, (int64_t[]){2});
  CHECK(cn_routine_compile(ctx, cn_asgn_fetch_constant(ctx, n, 1), (cn_backend_kind)5, "r") ==
        NULL);
  CHECK_STR(cn_ctx_error(ctx), "routine 'r': unknown backend kind 5");
  cn_ctx_destroy(ctx);
  return kind;
}

/* The cases of tests/e2e_cases.h on the interpreter, then on counting, compared bit for bit. */
static void test_e2e_cases(cn_backend_kind kind) {
  memset(&count, 0, sizeof count);
  backends[1] = kind;
  n_backends = 2;
  e2e_threads = false;
  e2e_run_all();
  /* 33 cases through run_both, then a slice (its run before the bind fails ahead of the backend),
   * the uniform stream and the merge buffer: one routine and one run each on counting */
  CHECK_INT(count.compiles, 44);
  CHECK_INT(count.runs, 36);
  /* runs are queued: a synchronize per download (a host read waits for it), and one per host
   * write of a buffer an upload may still read, none per run (there are fewer host writes than
   * runs here) */
  CHECK(count.synchronizations >= count.downloads);
  CHECK(count.synchronizations < count.downloads + count.runs);
  CHECK_INT(count.releases, 44);
  CHECK(count.uploads >= count.runs && count.downloads >= count.runs);
  CHECK(count.allocations > 0);
  CHECK_INT(count.frees, count.allocations);
}

/* A script on the registered backend: p 4 -> 2 -> 1 -> 0.5 (learning rate 1/4 on p^2). */
static void test_script(cn_backend_kind kind) {
  memset(&count, 0, sizeof count);
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  char *buf = NULL;
  size_t len = 0;
  FILE *out = open_memstream(&buf, &len);
  CHECK(out != NULL);
  cn_notation_options opts = {.backend = kind, .out = out};
  cn_status st = cn_notation_run(g, "counting.cnl",
                                 "let p = {p = 4.0}\n"
                                 "let loss = p *. p\n"
                                 "for step = 0 to 2 do\n"
                                 "  backprop loss\n"
                                 "  sgd loss ~learning_rate:0.25\n"
                                 "  printf \"p %g loss %g\\n\" p loss\n"
                                 "done\n",
                                 &opts);
  fclose(out);
  CHECK_MSG(st == CN_OK, "%s", cn_ctx_error(ctx));
  CHECK_STR(buf, "p 2 loss 4\np 1 loss 1\np 0.5 loss 0.25\n");
  free(buf);
  CHECK(count.runs >= 6); /* every backprop and sgd ran on counting: none was interpreted apart */
  /* every printf reads p and loss back (a download, waited for); no run waits */
  CHECK_INT(count.synchronizations, count.downloads);
  cn_ctx_destroy(ctx);
  CHECK_INT(count.frees, count.allocations);
  CHECK_INT(count.releases, count.compiles);
}

int main(void) {
  test_builtins();
  cn_backend_kind kind = test_register();
  test_e2e_cases(kind);
  test_script(kind);
  CHECK_DONE();
}
