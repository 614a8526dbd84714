/* An operation's logic (issue 31 item 6): its one parser, cn_shape_logic_parse ("." pointwise,
 * "@" compose, "T" transpose, any other text an einsum spec, with the einsum parser's message
 * quoting the text and its column), and the tensor layer taking the parsed record, not text: an
 * update and an operation built from a parsed spec whose text was replaced by one that does not
 * parse still build and compute the spec's values, and keep that very spec (the layer neither
 * compares nor re-parses text). The API's text forms and the notation keep their messages:
 * operation's "T" is refused by name, a malformed spec is reported where it was written. */
#include "check.h"
#include "notation_check.h"

#include "cannl.h"
#include "shape/shape.h"
#include "tensor/tensor.h"

static void run_code(cn_ctx *ctx, const cn_asgn *a, const char *name) {
  CHECK_MSG(a != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!a) return;
  cn_routine *r = cn_routine_compile(ctx, a, CN_BACKEND_INTERP, name);
  CHECK_MSG(r != NULL, "%s: %s", name, cn_ctx_error(ctx));
  if (!r) return;
  CHECK_MSG(cn_routine_run(r) == CN_OK, "%s: %s", name, cn_ctx_error(ctx));
  cn_routine_free(r);
}

/* text fails to parse with exactly `message`, leaving no spec. */
static void parse_error(cn_ctx *ctx, const char *text, const char *message) {
  cn_shape_logic l = {CN_SL_TERMINAL, (const cn_einsum *)&l};
  CHECK_INT(cn_shape_logic_parse(ctx, text, &l), CN_ERR_INVALID);
  CHECK_INT(l.kind, CN_SL_EINSUM);
  CHECK(l.spec == NULL);
  CHECK_STR(cn_ctx_error(ctx), message);
}

static void test_parse(void) {
  cn_ctx *ctx = cn_ctx_create();
  static const struct {
    const char *text;
    cn_shape_kind kind;
  } symbols[3] = {{".", CN_SL_POINTWISE}, {"@", CN_SL_COMPOSE}, {"T", CN_SL_TRANSPOSE}};
  for (int i = 0; i < 3; i++) {
    cn_shape_logic l = {CN_SL_TERMINAL, (const cn_einsum *)&l};
    CHECK_INT(cn_shape_logic_parse(ctx, symbols[i].text, &l), CN_OK);
    CHECK_INT(l.kind, symbols[i].kind);
    CHECK(l.spec == NULL);
    CHECK_INT(cn_shape_logic_kind(symbols[i].text), symbols[i].kind);
  }
  /* only the exact symbols: anything else is read as a spec */
  static const char *const specs[6] = {"t", " T", "@@", "..", "", "i=>i"};
  for (int i = 0; i < 6; i++) CHECK_INT(cn_shape_logic_kind(specs[i]), CN_SL_EINSUM);
  CHECK_INT(cn_shape_logic_kind(NULL), CN_SL_EINSUM);

  /* a matrix product: two operands, the result's output row i k */
  cn_shape_logic mm;
  CHECK_INT(cn_shape_logic_parse(ctx, "ij;jk=>ik", &mm), CN_OK);
  CHECK_INT(mm.kind, CN_SL_EINSUM);
  CHECK(mm.spec != NULL);
  if (mm.spec) {
    CHECK_STR(mm.spec->text, "ij;jk=>ik");
    CHECK_INT(mm.spec->n_rhs, 2);
    CHECK(!mm.spec->lhs.has_batch && !mm.spec->lhs.has_input);
    CHECK_INT(mm.spec->lhs.output.n_trailing, 2);
    if (mm.spec->lhs.output.n_trailing == 2) {
      CHECK_STR(mm.spec->lhs.output.trailing[0].label, "i");
      CHECK_STR(mm.spec->lhs.output.trailing[1].label, "k");
    }
    CHECK_INT(mm.spec->rhs[1].output.n_trailing, 2);
    CHECK(cn_einsum_equal(mm.spec, cn_einsum_parse(ctx, "ij;jk=>ik")));
  }

  parse_error(ctx, "ij;jk=>ik(",
              "einsum spec \"ij;jk=>ik(\": unexpected '(' at column 10\n"
              "  ij;jk=>ik(\n"
              "           ^");
  parse_error(ctx, "t",
              "einsum spec \"t\": missing '=>' at column 2\n"
              "  t\n"
              "   ^");
  parse_error(ctx, " @",
              "einsum spec \" @\": unexpected '@' at column 2\n"
              "   @\n"
              "   ^");
  parse_error(ctx, "",
              "einsum spec \"\": empty spec at column 1\n"
              "  \n"
              "  ^");
  parse_error(ctx, NULL, "einsum spec: NULL");
  cn_ctx_destroy(ctx);
}

/* `text` parsed, then given a text that does not parse: a layer that re-read it would fail. */
static cn_shape_logic parsed_with_text_replaced(cn_ctx *ctx, const char *text, cn_einsum *copy) {
  cn_shape_logic l = {CN_SL_TERMINAL, NULL};
  CHECK_INT(cn_shape_logic_parse(ctx, text, &l), CN_OK);
  CHECK_INT(l.kind, CN_SL_EINSUM);
  CHECK(l.spec != NULL);
  if (!l.spec) return l;
  *copy = *l.spec;
  copy->text = "not re-read (";
  CHECK(cn_einsum_parse(ctx, copy->text) == NULL);
  l.spec = copy;
  return l;
}

/* diag =: id v over "i=>ii": the vector on the diagonal. */
static void test_update_takes_the_parsed_spec(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims out3 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){3}, NULL}};
  cn_tensor *v = cn_tensor_data(g, "v", &out3, (double[]){1, 2, 3}, 3);
  cn_tensor *diag = cn_tensor_buffer(g, "diag", NULL);
  cn_einsum copy;
  cn_shape_logic l = parsed_with_text_replaced(ctx, "i=>ii", &copy);
  cn_update *u = cn_graph_update_logic(g, (cn_tref){diag, false}, true, CN_OP_ADD, CN_OP_ID, 1,
                                       (cn_tref[]){{v, false}}, &l);
  CHECK_MSG(u != NULL, "%s", cn_ctx_error(ctx));
  if (u) {
    CHECK(u->sop->kind == CN_SL_EINSUM && u->sop->args.spec == &copy);
    run_code(ctx, cn_graph_update_code(g, u), "diag");
    CHECK_STR(cn_tensor_shape(diag), "|->3,3");
    double got[9];
    CHECK(cn_node_get_values(cn_tensor_value(diag), false, got, 9) == CN_OK);
    for (int i = 0; i < 9; i++) CHECK_NEAR(got[i], i % 4 == 0 ? 1 + i / 4 : 0, 0);
  }
  cn_ctx_destroy(ctx);
}

/* m x over "ij;j=>i" with m = [[1, 2]; [3, 4]], x = [5; 6]: [17; 39]. */
static void test_operation_takes_the_parsed_spec(void) {
  cn_ctx *ctx = cn_ctx_create();
  cn_graph *g = cn_graph_create(ctx);
  cn_graph_set_prec(g, CN_PREC_DOUBLE);
  cn_dims out22 = {{0, NULL, NULL}, {0, NULL, NULL}, {2, (int64_t[]){2, 2}, NULL}};
  cn_dims out2 = {{0, NULL, NULL}, {0, NULL, NULL}, {1, (int64_t[]){2}, NULL}};
  cn_tensor *m = cn_tensor_data(g, "m", &out22, (double[]){1, 2, 3, 4}, 4);
  cn_tensor *x = cn_tensor_data(g, "x", &out2, (double[]){5, 6}, 2);
  /* code.logic is the text form's: the parsed form's function does not read it */
  const cn_op_code code = {"mv", 2, "not read (", CN_OP_ADD, "a * b", {"g * b", "a * g"}, false};
  cn_einsum copy;
  cn_shape_logic l = parsed_with_text_replaced(ctx, "ij;j=>i", &copy);
  cn_tensor *t = cn_tensor_operation_logic(g, &code, &l, (cn_tensor *[]){m, x});
  CHECK_MSG(t != NULL, "%s", cn_ctx_error(ctx));
  if (t) {
    CHECK(t->sop->kind == CN_SL_EINSUM && t->sop->args.spec == &copy);
    run_code(ctx, cn_graph_forward(g, t), "mv");
    CHECK_STR(cn_tensor_shape(t), "|->2");
    double got[2];
    CHECK(cn_node_get_values(cn_tensor_value(t), false, got, 2) == CN_OK);
    CHECK_NEAR(got[0], 17, 0);
    CHECK_NEAR(got[1], 39, 0);
  }
  /* the text form parses code.logic once, with the same parser and message */
  cn_op_code bad = code;
  bad.logic = "ij;j=>i(";
  CHECK(cn_tensor_operation(g, &bad, (cn_tensor *[]){m, x}) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "einsum spec \"ij;j=>i(\": unexpected '(' at column 8\n"
                               "  ij;j=>i(\n"
                               "         ^");
  bad.logic = "T";
  CHECK(cn_tensor_operation(g, &bad, (cn_tensor *[]){m, x}) == NULL);
  CHECK_STR(cn_ctx_error(ctx), "operation \"mv\": transpose (\"T\") is not an operation's logic "
                               "(\".\" pointwise, \"@\" compose or an einsum spec)");
  cn_ctx_destroy(ctx);
}

/* The notation parses ~logic once and reports its errors where the script wrote them. */
static void test_notation_messages(void) {
  CHECK_STR(run_error("let a = [1.0; 2.0]\nlet%cd f ~v ~v1 = v =: v1\n"
                      "let r = operation ~op_asn:f ~logic:\"T\" a\n"),
            "seed.cnl:3:9: operation \"operation\": transpose (\"T\") is not an operation's "
            "logic (\".\" pointwise, \"@\" compose or an einsum spec)\n"
            "let r = operation ~op_asn:f ~logic:\"T\" a\n"
            "        ^");
  CHECK_STR(run_error("let a = [1.0; 2.0]\nlet%cd u = {c} =:+ a ~logic:\"ij(\"\n"),
            "seed.cnl:2:16: einsum spec \"ij(\": unexpected '(' at column 3\n"
            "  ij(\n"
            "    ^\n"
            "let%cd u = {c} =:+ a ~logic:\"ij(\"\n"
            "               ^");
  /* the spliced stride reaches the tensor layer as part of the parsed spec */
  BOTH {
    outcome o;
    if (!run(&o, b,
             "let stride = 2\nlet x = [1.0; 2.0; 3.0; 4.0]\n"
             "let%cd u = {s} =:+ x ~logic:\"stride*o => o\"\nrun u\nprint s\n"))
      continue;
    expect(&o, b, 0, NULL, "|->2", VALUES(1, 3), 0);
  }
}

int main(void) {
  test_parse();
  test_update_takes_the_parsed_spec();
  test_operation_takes_the_parsed_spec();
  test_notation_messages();
  CHECK_DONE();
}
