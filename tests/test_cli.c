/* The `cannl` command (path in CANNL_CLI): `run` with a file and with -e, --json output parsed
 * for values, --emit, --backend, and the exit statuses (0 success, 1 runtime error, 2 usage or
 * parse error, with the positioned message on stderr); unreadable paths (missing, a directory, a
 * device) are refused with exit 2 and the reason; --set's values and errors; `export` writes C
 * that compiles alone, and keeps a label holding code in a comment (the injection of issue 27);
 * `export --sampler` is refused for a script without a text corpus (tests/test_names.c builds and
 * runs the sampler of one that has it), and `run` does not take it; export says what it wrote;
 * a printed NaN is said once on stderr; unknown commands and options suggest the closest; the
 * data-parallel options' refusals (a script's ~devices set by --set, the examples' --devices). */
#include "check.h"

#include <stdbool.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs a shell command line, its stdout and stderr into out; its exit status. */
static int shell(const char *cmd, char *out, size_t cap) {
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(out, 1, cap - 1, p) : 0;
  out[n] = '\0';
  int st = p ? pclose(p) : -1;
  return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs `program args` (through sh), returning its exit status and its stdout+stderr (stdout alone
 * when args redirect stderr themselves). */
static int run_program(const char *program, const char *args, char *out, size_t cap) {
  char cmd[8192];
  snprintf(cmd, sizeof cmd, "'%s' %s%s", program, args, strstr(args, "2>") ? "" : " 2>&1");
  return shell(cmd, out, cap);
}

/* The cannl command with args. */
static int run(const char *args, char *out, size_t cap) {
  const char *cli = getenv("CANNL_CLI");
  return run_program(cli ? cli : "cannl", args, out, cap);
}

/* An unknown command or option suggests the closest known ones: each exact message (exit 2). */
static void test_suggestions(char *out, size_t cap) {
  static const struct {
    const char *args, *message;
  } cases[] = {
      {"rnu x.cnl", "cannl: unknown command 'rnu', did you mean 'run'? (try 'cannl help')\n"},
      {"exprot x.cnl",
       "cannl: unknown command 'exprot', did you mean 'export'? (try 'cannl help')\n"},
      {"--verison", "cannl: unknown command '--verison', did you mean '--version'? (try 'cannl "
                    "help')\n"},
      {"frobnicate", "cannl: unknown command 'frobnicate' (try 'cannl help')\n"},
      {"ops x", "cannl: 'ops' takes no argument, not 'x' (try 'cannl help')\n"},
      {"run x.cnl --chek-nan",
       "cannl: unknown run option '--chek-nan', did you mean '--check-nan'? (try 'cannl help')\n"},
      {"run x.cnl --bakend=c",
       "cannl: unknown run option '--bakend=c', did you mean '--backend'? (try 'cannl help')\n"},
      {"run x.cnl --backend=interpp", "cannl: unknown backend 'interpp', did you mean 'interp'? "
                                      "(known: interp, c, opencl, cuda) (try 'cannl "
                                      "help')\n"},
      {"run x.cnl --emit=lops",
       "cannl: unknown --emit value 'lops', did you mean 'loops'? (known: asgn, loops, c) (try "
       "'cannl help')\n"},
      {"run x.cnl y.cnl", "cannl: unexpected argument 'y.cnl' (the script is 'x.cnl') (try 'cannl "
                          "help')\n"},
      {"export x.cnl --ouptut y",
       "cannl: unknown export option '--ouptut', did you mean '--output'? (try 'cannl help')\n"},
      {"demo --emitt c",
       "cannl: unknown demo option '--emitt', did you mean '--emit'? (try 'cannl help')\n"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    CHECK_INT(run(cases[i].args, out, cap), 2);
    CHECK_STR(out, cases[i].message);
  }
  /* a command's --help is the usage, not an unknown option */
  CHECK_INT(run("run --help", out, cap), 0);
  CHECK(strncmp(out, "usage: cannl <command> [options]\n", 33) == 0);
  CHECK_INT(run("export -h", out, cap), 0);
  CHECK(strncmp(out, "usage: cannl <command> [options]\n", 33) == 0);
}

/* example_fashion_mnist (beside the cannl command): --help prints the usage (exit 0), an unknown
 * option or backend suggests the closest, --resume without a checkpoint yet says so and trains from
 * the first epoch (when the data set is installed), as a script's `restore ~resume:true` does. */
static void test_fashion_example(char *out, size_t cap) {
  const char *cli = getenv("CANNL_CLI");
  char example[1024], args[2048];
  snprintf(example, sizeof example, "%.*s/example_fashion_mnist",
           cli && strrchr(cli, '/') ? (int)(strrchr(cli, '/') - cli) : 1, cli ? cli : ".");
  CHECK_INT(run_program(example, "--help", out, cap), 0);
  CHECK(strncmp(out, "usage: example_fashion_mnist [--model mlp|convnet]", 50) == 0);
  CHECK_HAS(out, "  --resume          go on from the checkpoint, bit for bit; when there is none");
  CHECK_INT(run_program(example, "--epoch 3", out, cap), 2);
  CHECK_STR(out, "unknown option '--epoch', did you mean '--epochs'?\n"
                 "(try example_fashion_mnist --help)\n");
  /* --backend names a registered backend (the examples share demo/backend.c) */
  CHECK_INT(run_program(example, "--backend intrp", out, cap), 2);
  CHECK_HAS(out, "unknown backend 'intrp', did you mean 'interp'? (known: interp, c");
  CHECK_HAS(out, "(try example_fashion_mnist --help)\n");
  if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) != 0) {
    printf("Fashion-MNIST is not installed: --resume without a checkpoint not run\n");
    return;
  }
  char dir[] = "/tmp/cannl_fashion_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  snprintf(args, sizeof args,
           "--train 200 --test 100 --epochs 1 --resume --checkpoint '%s/c.safetensors' --svg "
           "'%s/c.svg'",
           dir, dir);
  CHECK_INT(run_program(example, args, out, cap), 0);
  char note[512];
  snprintf(note, sizeof note,
           "note: no checkpoint %s/c.safetensors to resume from: training from the first epoch\n",
           dir);
  CHECK_HAS(out, note);
  CHECK_HAS(out, "epoch 1/1: training loss");
  /* without paths, the checkpoint and the SVG go under runs/ in the current directory, and the
   * program says where (issue 31: they filled the current directory) */
  snprintf(args, sizeof args, "cd '%s' && '%s' --train 200 --test 100 --epochs 1 2>&1", dir,
           example);
  CHECK_INT(shell(args, out, cap), 0);
  CHECK_HAS(out, "checkpoint: runs/fashion_mlp.safetensors\n");
  CHECK_HAS(out, "curves and confusion matrix: runs/fashion_mlp.svg\n");
  snprintf(args, sizeof args, "%s/runs/fashion_mlp.svg", dir);
  CHECK(access(args, R_OK) == 0);
  snprintf(args, sizeof args, "%s/runs/fashion_mlp.safetensors", dir);
  CHECK(access(args, R_OK) == 0);
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  CHECK_INT(system(args), 0);
}

/* Data-parallel training from the command line: a script's `~devices:devices` set with --set
 * (examples/moons.cnl's 80 batches do not divide among 3 devices: refused at the option), and the
 * examples' --devices N checked against the range of CPU devices. */
static void test_data_parallel(char *out, size_t cap) {
  const char *root = getenv("CANNL_SOURCE_DIR"), *cli = getenv("CANNL_CLI");
  char args[4096], example[1024];
  snprintf(args, sizeof args, "run '%s/examples/moons.cnl' --set devices=3", root ? root : ".");
  CHECK_INT(run(args, out, cap), 1);
  CHECK_HAS(out, "examples/moons.cnl:29:34: ~devices: the loop's 80 values of 'batch_n' do not "
                 "divide among 3 slots (3 devices x 1 process), which take 3 consecutive values "
                 "at each step\n");
  snprintf(example, sizeof example, "%.*s/example_moons",
           cli && strrchr(cli, '/') ? (int)(strrchr(cli, '/') - cli) : 1, cli ? cli : ".");
  CHECK_INT(run_program(example, "--devices 0", out, cap), 2);
  CHECK_HAS(out, "--devices takes a count of CPU devices in [1, 64], not '0'\n");
  CHECK_HAS(out, "[--devices N] [--batch N]");
  snprintf(example, sizeof example, "%.*s/example_fashion_mnist",
           cli && strrchr(cli, '/') ? (int)(strrchr(cli, '/') - cli) : 1, cli ? cli : ".");
  CHECK_INT(run_program(example, "--devices 65", out, cap), 2);
  CHECK_STR(out, "--devices takes a count of CPU devices in [1, 64], not '65'\n"
                 "(try example_fashion_mnist --help)\n");
}

/* DIR/NAME holding text. */
static void write_file(const char *dir, const char *name, const char *text) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  CHECK(f != NULL);
  if (f) {
    fputs(text, f);
    CHECK(fclose(f) == 0);
  }
}

/* DIR/NAME.c (exported from the tiny model relu(w x + b), w = [(1, 2, 3); (4, 5, 6)],
 * b = [1; -1]) compiled alone under -Wall -Wextra -Werror, then linked into a program that calls
 * NAME_forward on [1; 2; 3]: it must print relu(w [1; 2; 3] + b) = [15; 31]. */
static void check_tiny_model(const char *dir, const char *name) {
  char args[4096];
  snprintf(args, sizeof args, "cc -std=c11 -Wall -Wextra -Werror -c '%s/%s.c' -o '%s/%s.o'", dir,
           name, dir, name);
  CHECK_INT(system(args), 0);
  char main_c[512];
  snprintf(main_c, sizeof main_c,
           "#include \"%s.h\"\n#include <stdio.h>\nint main(void) {\n"
           "  float in[3] = {1, 2, 3}, out[2];\n  %s_forward(in, out);\n"
           "  printf(\"%%g %%g\\n\", out[0], out[1]);\n  return 0;\n}\n",
           name, name);
  write_file(dir, "main.c", main_c);
  snprintf(args, sizeof args,
           "cc -std=c11 -o '%s/%s' '%s/main.c' '%s/%s.o' -lm && '%s/%s' > '%s/out.txt'", dir, name,
           dir, dir, name, dir, name, dir);
  CHECK_INT(system(args), 0);
  snprintf(args, sizeof args, "%s/out.txt", dir);
  char computed[64] = "";
  FILE *f;
  if ((f = fopen(args, "r"))) {
    CHECK(fgets(computed, sizeof computed, f) != NULL);
    fclose(f);
  }
  CHECK_STR(computed, "15 31\n");
}

/* `cannl export`: a script with a placeholder and a tiny model, exported into a fresh directory
 * as C that compiles alone and declares NAME_forward; the usage and name errors. */
static void test_export(char *out, size_t cap) {
  char dir[] = "/tmp/cannl_export_XXXXXX", args[4096];
  CHECK(mkdtemp(dir) != NULL);
  write_file(dir, "tiny.cnl",
             "let image = placeholder ~output_dims:[3]\n"
             "let%op model x = relu ({w = [(1, 2, 3); (4, 5, 6)]} * x + {b = [1; -1]})\n"
             "let logits = model image\n"
             "print \"built\"\n");
  snprintf(args, sizeof args,
           "export '%s/tiny.cnl' --input image --output logits --name tiny -o '%s'", dir, dir);
  CHECK_INT(run(args, out, cap), 0);
  CHECK_HAS(out, "built");
  /* export says what it wrote where */
  char said[1024];
  snprintf(said, sizeof said,
           "cannl: exported tiny_forward ('logits' from 'image') to %s/tiny.c and %s/tiny.h\n", dir,
           dir);
  CHECK_HAS(out, said);
  snprintf(args, sizeof args,
           "grep -q 'void tiny_forward(const float \\*in, float \\*out);' '%s/tiny.h'", dir);
  CHECK_INT(system(args), 0);
  check_tiny_model(dir, "tiny");
  snprintf(args, sizeof args, "export '%s/tiny.cnl' --input image --output nothing -o '%s'", dir,
           dir);
  CHECK_INT(run(args, out, cap), 1);
  CHECK_HAS(out, "tiny.cnl:4:1: export: the output 'nothing' is not a name the script binds");
  CHECK_INT(run("export -e 'print 1' --input image", out, cap), 2);
  CHECK_HAS(out, "export needs --input NAME and --output NAME");
  /* --sampler belongs to export, and needs the script's text_windows corpus */
  snprintf(args, sizeof args,
           "export '%s/tiny.cnl' --input image --output logits --name tiny --sampler -o '%s'", dir,
           dir);
  CHECK_INT(run(args, out, cap), 1);
  CHECK_HAS(out, "tiny.cnl:4:1: export --sampler: the script reads no text corpus (text_windows)");
  CHECK_INT(run("run -e 'print 1' --sampler", out, cap), 2);
  CHECK_HAS(out, "cannl: option '--sampler' belongs to export, not to run (try 'cannl help')");
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  CHECK_INT(system(args), 0);
}

/* The reproducer: a script whose parameter label (through ~config's label) holds a
 * comment terminator, a constructor calling system() and a comment opener. The export must stay
 * data: it compiles under -Wall -Wextra -Werror, a program linking it computes the model and the
 * payload's file is never created. And a --name that is no C name cannl can use is refused. */
static void test_export_injection(char *out, size_t cap) {
  char dir[] = "/tmp/cannl_inject_XXXXXX", args[4096];
  CHECK(mkdtemp(dir) != NULL);
  char script[1024];
  snprintf(script, sizeof script,
           "let image = placeholder ~output_dims:[3]\n"
           "let%%op model ~config x = relu ({w = [(1, 2, 3); (4, 5, 6)]} * x + [1.0; -1.0])\n"
           "let net = model ~config:{ label = [\"*/ __attribute__((constructor)) static void "
           "f(void){ system(\\\"touch %s/pwned\\\"); } /*\"] }\n"
           "let logits = net image\n",
           dir);
  write_file(dir, "inj.cnl", script);
  snprintf(args, sizeof args,
           "export '%s/inj.cnl' --input image --output logits --name inj -o '%s'", dir, dir);
  CHECK_INT(run(args, out, cap), 0);
  check_tiny_model(dir, "inj");
  snprintf(args, sizeof args, "%s/pwned", dir);
  CHECK_MSG(access(args, F_OK) != 0, "the label's code ran: %s exists", args);
  snprintf(args, sizeof args,
           "export '%s/inj.cnl' --input image --output logits --name 'cn_inj' -o '%s'", dir, dir);
  CHECK_INT(run(args, out, cap), 1);
  CHECK_HAS(out, "inj.cnl:4:1: export: the name 'cn_inj' is not a C identifier cannl can use (a "
                 "letter, then ASCII letters, digits and '_', not starting with cn_ or CN_)");
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  CHECK_INT(system(args), 0);
}

/* Whether DIR/NAME exists. */
static bool exists(const char *dir, const char *name) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  return access(path, F_OK) == 0;
}

/* The files a script writes with a relative path go under --out DIR, default runs/ (issue 31:
 * scripts filled the current directory), directories created; restore reads the checkpoint back
 * from there; absolute paths are kept; a line on stderr names what was written. */
static void test_out_dir(char *out, size_t cap) {
  char dir[] = "/tmp/cannl_out_XXXXXX", args[4096], script[2048];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(script, sizeof script,
           "let p = {p = [1.0; 2.0]}\nlet loss = sum (p *. p)\n"
           "let start = restore \"m.safetensors\" loss ~optimizer:\"sgd\"\n"
           "for e = start to start + 1 do\n  backprop loss\n  sgd loss ~learning_rate:0.25\n"
           "  plot \"sub/curve.svg\" ~x:e (\"loss\", loss)\n"
           "  checkpoint \"m.safetensors\" loss ~epoch:(e + 1)\ndone\n"
           "save_npy \"p.npy\" p\nsave_npy \"%s/abs.npy\" p\nprintf \"start %%d\\n\" start\n",
           dir);
  write_file(dir, "s.cnl", script);
  const char *cli = getenv("CANNL_CLI");
  if (!cli) cli = "cannl";
  snprintf(args, sizeof args, "cd '%s' && '%s' run s.cnl 2>&1", dir, cli);
  CHECK_INT(shell(args, out, cap), 0);
  char wrote[1024];
  snprintf(wrote, sizeof wrote,
           "wrote runs/sub/curve.svg, runs/m.safetensors, runs/p.npy, %s/abs.npy\n", dir);
  CHECK_HAS(out, "start 0\n");
  CHECK_HAS(out, wrote);
  CHECK(exists(dir, "runs/sub/curve.svg") && exists(dir, "runs/m.safetensors") &&
        exists(dir, "runs/p.npy") && exists(dir, "abs.npy"));
  CHECK(!exists(dir, "m.safetensors") && !exists(dir, "p.npy") && !exists(dir, "sub"));
  /* the second run resumes from runs/m.safetensors: two epochs were done */
  CHECK_INT(shell(args, out, cap), 0);
  CHECK_HAS(out, "start 2\n");
  /* --out DIR, and --out . (the current directory, unprefixed) */
  snprintf(args, sizeof args,
           "cd '%s' && '%s' run s.cnl --out o2 2>&1 && '%s' run s.cnl --out . 2>&1", dir, cli, cli);
  CHECK_INT(shell(args, out, cap), 0);
  CHECK_HAS(out, "wrote o2/sub/curve.svg, o2/m.safetensors, o2/p.npy, ");
  CHECK_HAS(out, "wrote sub/curve.svg, m.safetensors, p.npy, ");
  CHECK(exists(dir, "o2/m.safetensors") && exists(dir, "sub/curve.svg") &&
        exists(dir, "m.safetensors"));
  /* an output directory that cannot be made: a positioned error */
  snprintf(args, sizeof args, "cd '%s' && '%s' run s.cnl --out s.cnl/x 2>&1", dir, cli);
  CHECK_INT(shell(args, out, cap), 1);
  CHECK_HAS(out, "s.cnl:7:8: cannot create output directory 's.cnl/x/sub' ('s.cnl/x': Not a "
                 "directory)");
  snprintf(args, sizeof args, "rm -rf '%s'", dir);
  CHECK_INT(system(args), 0);
}

/* `cannl devices`: one line per backend, the host's CPU model as /proc/cpuinfo names it; and
 * CANNL_BACKEND choosing run's backend (the interpreter refuses --emit=c), checked by name. */
static void test_devices(char *out, size_t cap) {
  char model[256] = "unknown", line[512], expected[600];
  FILE *f = fopen("/proc/cpuinfo", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "model name", 10) == 0 && strchr(line, ':')) {
      snprintf(model, sizeof model, "%s", strchr(line, ':') + 2);
      model[strcspn(model, "\n")] = '\0';
      break;
    }
  if (f) fclose(f);
  CHECK_INT(run("devices", out, cap), 0);
  snprintf(expected, sizeof expected, "interp   the host: %s, %ld cores, ", model,
           sysconf(_SC_NPROCESSORS_ONLN));
  CHECK_HAS(out, expected);
  CHECK_HAS(out, " GiB of memory (reference)\n");
  snprintf(expected, sizeof expected, "c        the host: %s, ", model);
  CHECK_HAS(out, expected);
  CHECK_HAS(out, " GiB of memory (tunable, parallel, compiled)\n");
  /* the CUDA device, or why there is none (not a failure of the listing) */
  CHECK_MSG(strstr(out, "\ncuda     unavailable: no ") || strstr(out, ", compute capability "),
            "%s", out);
  CHECK_HAS(out, " (device memory, compiled)\n");
  bool ptx_only =
      strstr(out, "\ncuda     unavailable: no ") && strstr(out, "kernels compile to PTX");
  const char *cli = getenv("CANNL_CLI");
  char cmd[2048];
  snprintf(cmd, sizeof cmd, "CANNL_BACKEND=interp '%s' run -e 'print 1' --emit=c 2>&1",
           cli ? cli : "cannl");
  CHECK_INT(shell(cmd, out, cap), 2);
  CHECK_HAS(out, "--emit=c needs a backend that generates code, not --backend interp");
  snprintf(cmd, sizeof cmd, "CANNL_BACKEND=c '%s' run -e 'print 1' --emit=c 2>&1",
           cli ? cli : "cannl");
  CHECK_INT(shell(cmd, out, cap), 0);
  /* --emit=c --backend cuda prints the CUDA source even where no GPU runs it, then says why */
  if (ptx_only) {
    snprintf(cmd, sizeof cmd,
             "'%s' run -e 'let x = {x = [1.0; 2.0; 3.0]}\nprint (x *. 2.)' --emit=c --backend "
             "cuda 2>&1",
             cli ? cli : "cannl");
    CHECK_INT(shell(cmd, out, cap), 1);
    const char *source = strstr(out, "# cnl_1: C\n"), *kernel = strstr(out, "__global__ void");
    const char *why = strstr(out, "<-e>:2:8: no CUDA");
    CHECK_MSG(source && kernel && why && source < kernel && kernel < why, "%s", out);
  } else {
    printf("--emit=c --backend cuda without a GPU: skipped (NVRTC absent or a GPU present)\n");
  }
  snprintf(cmd, sizeof cmd, "CANNL_BACKEND=intrp '%s' run -e 'print 1' 2>&1", cli ? cli : "cannl");
  CHECK_INT(shell(cmd, out, cap), 2);
  CHECK_HAS(out, "CANNL_BACKEND: unknown backend 'intrp', did you mean 'interp'? (known: interp, "
                 "c, opencl, cuda)");
  /* a device that cannot be opened is listed with the reason, and `devices` still succeeds */
  snprintf(cmd, sizeof cmd, "CANNL_OPENCL_DEVICE=5:0 '%s' devices 2>&1", cli ? cli : "cannl");
  CHECK_INT(shell(cmd, out, cap), 0);
  CHECK_HAS(out, "\nopencl   unavailable: opencl: ");
  CHECK_HAS(out, " (device memory, compiled)\n");
  /* where OpenCL is: a script on it (every routine on the device: interpret_below 0) prints what
   * it prints on C */
  CHECK_INT(run("devices", out, cap), 0);
  if (!strstr(out, "opencl   unavailable")) {
    static const char script[] = "let a = [1; 2; 3]\nlet b = a + a + 0.5\nprint b";
    char c_out[256];
    snprintf(cmd, sizeof cmd, "CANNL_INTERPRET_BELOW=0 '%s' run --backend c -e '%s' 2>&1",
             cli ? cli : "cannl", script);
    CHECK_INT(shell(cmd, c_out, sizeof c_out), 0);
    snprintf(cmd, sizeof cmd, "CANNL_INTERPRET_BELOW=0 '%s' run --backend opencl -e '%s' 2>&1",
             cli ? cli : "cannl", script);
    CHECK_INT(shell(cmd, out, cap), 0);
    CHECK_STR(out, c_out);
    CHECK_HAS(out, "2.5");
  }
}

int main(void) {
  static char out[1 << 16];
  const char *root = getenv("CANNL_SOURCE_DIR");
  char args[4096];

  snprintf(args, sizeof args, "run '%s/examples/micrograd.cnl' --backend interp --json",
           root ? root : ".");
  CHECK_INT(run(args, out, sizeof out), 0);
  CHECK_HAS(out, "\"label\": \"g\"");
  CHECK_HAS(out, "\"label\": \"a.grad\"");
  const char *v = strstr(out, "\"label\": \"b.grad\"");
  v = v ? strstr(v, "\"values\": [") : NULL;
  CHECK(v && fabs(strtod(v + strlen("\"values\": ["), NULL) - 645.5773) < 1e-3);

  CHECK_INT(
      run("run -e 'print ([(1, 2); (3, 4)] * [1; 1])' --json --backend interp", out, sizeof out),
      0);
  CHECK_HAS(out, "\"output\": [2], \"values\": [3, 7]}");

  CHECK_INT(run("run -e 'let x = [1; 2]\nprint (x *. x)' --emit=asgn --backend c", out, sizeof out),
            0);
  CHECK_HAS(out, "# cnl_1: assignments");
  CHECK_HAS(out, "mul =:+ x * x;");

  CHECK_INT(run("run -e 'let x = [1; 2' --backend interp", out, sizeof out), 2);
  CHECK_HAS(out, "<-e>:1:14: expected");
  CHECK_INT(run("run -e 'print nothing' --backend interp", out, sizeof out), 1);
  CHECK_HAS(out, "<-e>:1:7: unbound name 'nothing'");
  /* both streams on one pipe: the earlier print comes before the later error */
  CHECK_INT(run("run -e 'print [5]\nprint nothing' --backend interp", out, sizeof out), 1);
  const char *printed = strstr(out, "5"), *failed = strstr(out, "<-e>:2:7: unbound name");
  CHECK(printed && failed && printed < failed);
  CHECK_INT(run("run --backend gpu -e 'print 1'", out, sizeof out), 2);
  CHECK_HAS(out,
            "unknown backend 'gpu' (known: interp, c, opencl, cuda)"); /* the registry's list */
  CHECK_INT(run("run /nonexistent/file.cnl", out, sizeof out), 2);
  CHECK_HAS(out, "cannl: cannot read '/nonexistent/file.cnl': No such file or directory");
  /* a directory (fopen succeeds on one) and a non-regular file are refused, not run as empty */
  snprintf(args, sizeof args, "run '%s/examples'", root ? root : ".");
  CHECK_INT(run(args, out, sizeof out), 2);
  CHECK_HAS(out, "/examples': it is a directory");
  CHECK_INT(run("run /dev/null", out, sizeof out), 2);
  CHECK_HAS(out, "cannl: cannot read '/dev/null': it is not a regular file");
  CHECK_INT(run("run -e 'print [1]' --emit=c --backend interp", out, sizeof out), 2);
  /* --check-nan: the first NaN a routine writes stops the run (exit 1), at the tensor's line */
  CHECK_INT(run("run --check-nan --backend interp -e 'let y = log [1.0; -1.0]\nprint y'", out,
                sizeof out),
            1);
  CHECK_HAS(out, "<-e>:1:9: routine 'cnl_1' wrote NaN into \"y\" (#2) at [1]");
  CHECK_INT(run("run --backend interp -e 'let y = log [1.0; -1.0]\nprint y'", out, sizeof out), 0);
  /* without it, the NaN printed is said once at the end, on stderr (not among --json's lines) */
  CHECK_HAS(out, "\nwarning: the script printed a NaN or an infinity: nan in \"y\" (#2) at "
                 "<-e>:2:7 (--check-nan");
  CHECK_INT(run("run --json --backend interp -e 'let y = log [1.0; -1.0]\nprint y' 2>/dev/null",
                out, sizeof out),
            0);
  CHECK_STR(out, "{\"label\": \"y\", \"batch\": [], \"input\": [], \"output\": [2], "
                 "\"values\": [0, \"nan\"]}\n");
  /* --set NAME=VALUE replaces a top-level literal (repeatable); a bad one is an error */
  CHECK_INT(run("run --backend interp -e 'let n = 2\nlet s = \"a\"\nprintf \"%d %s\\n\" n s' "
                "--set n=5 --set s=b",
                out, sizeof out),
            0);
  CHECK_STR(out, "5 b\n");
  CHECK_INT(run("run -e 'let n = 2' --set m=1", out, sizeof out), 1);
  CHECK_HAS(out, "--set m=1: the script has no top-level let m = LITERAL");
  CHECK_INT(run("run -e 'let n = 2' --set n=x", out, sizeof out), 1);
  CHECK_HAS(out, "<-e>:1:9: --set n=x: 'n' is an integer here, and 'x' is not");
  CHECK_INT(run("run -e 'let n = 2' --set n", out, sizeof out), 2);
  CHECK_HAS(out, "cannl: --set expects NAME=VALUE, not 'n'");
  CHECK_INT(run("run -e 'let n = 2' --set", out, sizeof out), 2);
  CHECK_HAS(out, "cannl: option '--set' needs a value NAME=VALUE");
  CHECK_INT(run("help", out, sizeof out), 0);
  CHECK_HAS(out, "[--set NAME=VALUE]...");
  CHECK_INT(run("--version", out, sizeof out), 0);
  CHECK_HAS(out, "cannl ");
  test_export(out, sizeof out);
  test_export_injection(out, sizeof out);
  test_suggestions(out, sizeof out);
  test_fashion_example(out, sizeof out);
  test_out_dir(out, sizeof out);
  test_devices(out, sizeof out);
  test_data_parallel(out, sizeof out);
  CHECK_DONE();
}
