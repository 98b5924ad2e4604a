// greedy: greedy text generation through llama.cpp on one or more chosen ggml devices.
//
//   greedy --list-devices          (name, type, description, memory of every ggml device)
//   greedy -m MODEL [--dev NAME[/NAME...]|none] [--sm none|layer|row|tensor] [--ts A/B/...]
//          [--fa on|off] [--ctk T] [--ctv T] [-n N] [-b B] [-t T]
//          (-p TEXT | --prompt-tokens P) [--warmup] [--margins] [--top K] [--logits FILE]
//          [--embd FILE] [--retry] [-v]
//
// --dev NAME   offload every layer to the device called NAME (ggml_backend_dev_by_name, e.g.
//              POLYCL0 when GGML_BACKEND_PATH points at libggml-polycl.so);
// --dev A/B    several devices (up to 16), split as --sm says;
// --dev none   no offload device: the CPU backend computes everything (the reference).
// --sm MODE    llama's split mode over the devices (default layer, llama's default);
//              tensor needs flash attention (--fa on).
// --ts A/B     tensor-split ratios, one per device (llama's -ts); default: none (all zero).
// --ctk T      the KV cache's K type (llama's -ctk): f16 (default), q8_0 or q4_0; --ctv the
//              V type (quantized V needs --fa on).
// --logits F   writes the float logits of every generation step to F (raw, n_vocab floats per
//              step), so runs can be compared bit for bit.
// --embd F     asks llama for embeddings too and writes the last token's (the output norm's
//              row, n_embd floats) of every generation step to F (raw).
// The prompt is decoded in batches of B tokens (n_batch = n_ubatch = B), then N tokens are
// generated one per llama_decode by argmax over the logits (lowest id wins a tie).
//
// --retry     a generation step whose llama_decode fails is decoded once more (a backend that
//              reports a failed compute and recovers, e.g. POLYCL_FAULT=handoff); "retried: N"
//              then says how many were.
// --warmup decodes the prompt and one token once before the timed run (kernel compilation),
// then clears the cache. --margins and --top K print diagnostics.
//
// Prints:
//   tokens: <generated ids>
//   text: <detokenized generated text, control bytes escaped>
//   margin: min <smallest top1-top2 logit gap> at step <i>, logit std <std of the first logits>
//   margins: <top1-top2 gap of every step>      (only with --margins)
//   speed: prompt X tok/s, decode Y tok/s
//   ttft: model load X s, first token Y s after the load
// Errors print a message to stderr and exit with status 1.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ggml-backend.h"
#include "llama.h"

static void usage(const char * argv0) {
    fprintf(stderr,
            "usage: %s --list-devices\n"
            "       %s -m MODEL [--dev NAME[/NAME...]|none] [--sm none|layer|row|tensor]\n"
            "          [--ts A/B/...] [--fa on|off] [--ctk T] [--ctv T] [-n N] [-b B] [-t THREADS]\n"
            "          (-p TEXT | --prompt-tokens P) [--warmup] [--margins] [--top K]\n"
            "          [--logits FILE] [--embd FILE] [--retry] [-v]\n",
            argv0, argv0);
}

static void die(const char * fmt, const char * arg) {
    fprintf(stderr, "greedy: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

static bool g_verbose = false;

static void log_cb(enum ggml_log_level level, const char * text, void * user_data) {
    (void) user_data;
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR || level == GGML_LOG_LEVEL_WARN) {
        fputs(text, stderr);
    }
}

static int parse_int(const char * s, const char * what) {
    char * end = NULL;
    long   v   = strtol(s, &end, 10);
    if (end == s || *end != '\0' || v < 0 || v > 1000000) {
        die("bad value for %s", what);
    }
    return (int) v;
}

#define MAX_DEVS 16

// Splits "a/b/c" in place into at most MAX_DEVS parts; returns the count.
static int split_slash(char * s, char ** parts) {
    int n = 0;
    for (char * p = s;; p++) {
        if (n == MAX_DEVS) {
            die("%s", "more than 16 values in a /-separated list");
        }
        parts[n++] = p;
        p = strchr(p, '/');
        if (p == NULL) {
            break;
        }
        *p = '\0';
    }
    return n;
}

// ggml_backend_load_all() searches the executable's folder and the working directory for
// libggml-cpu.so; this binary lives elsewhere, so load the CPU backend from libggml.so's folder.
static void load_cpu_backend_if_missing(void) {
    if (ggml_backend_reg_by_name("CPU") != NULL) {
        return;
    }
    Dl_info info;
    if (dladdr((void *) &ggml_backend_load_all, &info) == 0 || info.dli_fname == NULL) {
        die("%s", "cannot locate libggml.so to find the CPU backend");
    }
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", info.dli_fname);
    char * slash = strrchr(dir, '/');
    if (slash == NULL) {
        die("cannot locate the CPU backend next to %s", info.dli_fname);
    }
    *slash = '\0';
    char path[4200];
    snprintf(path, sizeof(path), "%s/libggml-cpu.so", dir);
    if (ggml_backend_load(path) == NULL) {
        die("cannot load the CPU backend %s", path);
    }
}

int main(int argc, char ** argv) {
    const double t_start = now_s();
    const char * model_path   = NULL;
    const char * dev_name     = "none";
    const char * split_mode   = NULL;
    const char * ts_arg       = NULL;
    const char * logits_path  = NULL;
    const char * embd_path    = NULL;
    const char * prompt_text  = NULL;
    int          prompt_ntok  = -1;
    int          n_gen        = 32;
    int          n_batch      = 512;
    int          n_threads    = (int) sysconf(_SC_NPROCESSORS_ONLN);
    bool         print_margins = false;
    bool         warmup        = false;
    bool         list_devices  = false;
    int          print_top     = 0;
    bool         retry         = false;
    int          retried       = 0;
    enum llama_flash_attn_type fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    enum ggml_type type_k = GGML_TYPE_F16, type_v = GGML_TYPE_F16;

    for (int i = 1; i < argc; i++) {
        const char * a = argv[i];
        const bool   has_val = i + 1 < argc;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(argv[0]);
            return 0;
        } else if (strcmp(a, "-v") == 0) {
            g_verbose = true;
        } else if (strcmp(a, "--list-devices") == 0) {
            list_devices = true;
        } else if (strcmp(a, "--top") == 0 && has_val) {
            print_top = parse_int(argv[++i], "--top");
        } else if (strcmp(a, "--warmup") == 0) {
            warmup = true;
        } else if (strcmp(a, "--margins") == 0) {
            print_margins = true;
        } else if (strcmp(a, "--retry") == 0) {
            retry = true;
        } else if (!has_val) {
            usage(argv[0]);
            die("missing value after %s", a);
        } else if (strcmp(a, "-m") == 0) {
            model_path = argv[++i];
        } else if (strcmp(a, "--dev") == 0) {
            dev_name = argv[++i];
        } else if (strcmp(a, "--sm") == 0) {
            split_mode = argv[++i];
        } else if (strcmp(a, "--ts") == 0) {
            ts_arg = argv[++i];
        } else if (strcmp(a, "--logits") == 0) {
            logits_path = argv[++i];
        } else if (strcmp(a, "--embd") == 0) {
            embd_path = argv[++i];
        } else if (strcmp(a, "--fa") == 0) {
            const char * v = argv[++i];
            if (strcmp(v, "on") == 0) {
                fa = LLAMA_FLASH_ATTN_TYPE_ENABLED;
            } else if (strcmp(v, "off") == 0) {
                fa = LLAMA_FLASH_ATTN_TYPE_DISABLED;
            } else {
                die("--fa takes on or off, not '%s'", v);
            }
        } else if (strcmp(a, "--ctk") == 0 || strcmp(a, "--ctv") == 0) {
            const char * v = argv[++i];
            enum ggml_type t;
            if (strcmp(v, "f16") == 0) {
                t = GGML_TYPE_F16;
            } else if (strcmp(v, "q8_0") == 0) {
                t = GGML_TYPE_Q8_0;
            } else if (strcmp(v, "q4_0") == 0) {
                t = GGML_TYPE_Q4_0;
            } else {
                die("--ctk and --ctv take f16, q8_0 or q4_0, not '%s'", v);
            }
            *(strcmp(a, "--ctk") == 0 ? &type_k : &type_v) = t;
        } else if (strcmp(a, "-n") == 0) {
            n_gen = parse_int(argv[++i], "-n");
        } else if (strcmp(a, "-b") == 0) {
            n_batch = parse_int(argv[++i], "-b");
        } else if (strcmp(a, "-t") == 0) {
            n_threads = parse_int(argv[++i], "-t");
        } else if (strcmp(a, "-p") == 0) {
            prompt_text = argv[++i];
        } else if (strcmp(a, "--prompt-tokens") == 0) {
            prompt_ntok = parse_int(argv[++i], "--prompt-tokens");
        } else {
            usage(argv[0]);
            die("unknown argument %s", a);
        }
    }
    if (list_devices) {
        llama_log_set(log_cb, NULL);
        ggml_backend_load_all();
        load_cpu_backend_if_missing();
        for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
            ggml_backend_dev_t d = ggml_backend_dev_get(i);
            size_t             free_b = 0, total_b = 0;
            ggml_backend_dev_memory(d, &free_b, &total_b);
            const enum ggml_backend_dev_type t = ggml_backend_dev_type(d);
            printf("%s\t%s\t%s\t%zu MiB\n", ggml_backend_dev_name(d),
                   t == GGML_BACKEND_DEVICE_TYPE_CPU   ? "CPU" :
                   t == GGML_BACKEND_DEVICE_TYPE_GPU   ? "GPU" :
                   t == GGML_BACKEND_DEVICE_TYPE_IGPU  ? "IGPU" :
                   t == GGML_BACKEND_DEVICE_TYPE_ACCEL ? "ACCEL" :
                   t == GGML_BACKEND_DEVICE_TYPE_META  ? "META" : "?",
                   ggml_backend_dev_description(d), total_b >> 20);
        }
        return 0;
    }
    if (model_path == NULL) {
        usage(argv[0]);
        die("%s", "-m MODEL is required");
    }
    if ((prompt_text == NULL) == (prompt_ntok < 0)) {
        usage(argv[0]);
        die("%s", "give exactly one of -p TEXT and --prompt-tokens P");
    }
    if (n_batch < 1) {
        die("%s", "-b must be at least 1");
    }
    if (n_threads < 1) {
        n_threads = 1;
    }

    llama_log_set(log_cb, NULL);
    ggml_backend_load_all();  // honours GGML_BACKEND_PATH
    load_cpu_backend_if_missing();
    llama_backend_init();

    ggml_backend_dev_t devices[MAX_DEVS + 1] = { NULL };
    int                n_devices              = 0;
    const bool         offload                = strcmp(dev_name, "none") != 0;
    if (offload) {
        char * names[MAX_DEVS];
        n_devices = split_slash(strdup(dev_name), names);
        for (int d = 0; d < n_devices; d++) {
            devices[d] = ggml_backend_dev_by_name(names[d]);
            if (devices[d] == NULL) {
                fprintf(stderr, "greedy: error: device '%s' not found; devices:", names[d]);
                for (size_t i = 0; i < ggml_backend_dev_count(); i++) {
                    fprintf(stderr, " %s", ggml_backend_dev_name(ggml_backend_dev_get(i)));
                }
                fprintf(stderr, "%s\n", getenv("GGML_BACKEND_PATH") ? "" : " (GGML_BACKEND_PATH is not set)");
                return 1;
            }
            if (g_verbose) {
                fprintf(stderr, "greedy: device %s: %s\n", ggml_backend_dev_name(devices[d]),
                        ggml_backend_dev_description(devices[d]));
            }
        }
    }

    struct llama_model_params mparams = llama_model_default_params();
    mparams.devices                   = devices;
    mparams.n_gpu_layers              = offload ? 99 : 0;
    if (split_mode != NULL) {
        if (strcmp(split_mode, "none") == 0) {
            mparams.split_mode = LLAMA_SPLIT_MODE_NONE;
        } else if (strcmp(split_mode, "layer") == 0) {
            mparams.split_mode = LLAMA_SPLIT_MODE_LAYER;
        } else if (strcmp(split_mode, "row") == 0) {
            mparams.split_mode = LLAMA_SPLIT_MODE_ROW;
        } else if (strcmp(split_mode, "tensor") == 0) {
            mparams.split_mode = LLAMA_SPLIT_MODE_TENSOR;
        } else {
            die("--sm takes none, layer, row or tensor, not '%s'", split_mode);
        }
    }
    // llama reads llama_max_devices() floats; unused entries stay 0.
    float * tensor_split = calloc(llama_max_devices(), sizeof(float));
    if (ts_arg != NULL) {
        char *    parts[MAX_DEVS];
        const int n = split_slash(strdup(ts_arg), parts);
        if ((size_t) n > llama_max_devices()) {
            die("%s", "--ts has more values than llama_max_devices()");
        }
        for (int k = 0; k < n; k++) {
            char * end    = NULL;
            tensor_split[k] = strtof(parts[k], &end);
            if (end == parts[k] || *end != '\0') {
                die("bad --ts value '%s'", parts[k]);
            }
        }
        mparams.tensor_split = tensor_split;
    }
    struct llama_model * model        = llama_model_load_from_file(model_path, mparams);
    if (model == NULL) {
        die("cannot load model %s", model_path);
    }
    const double t_loaded = now_s();
    const struct llama_vocab * vocab   = llama_model_get_vocab(model);
    const int                  n_vocab = llama_vocab_n_tokens(vocab);

    // Prompt tokens.
    int           n_ctx  = 1024;
    llama_token * prompt = NULL;
    int           n_prompt;
    if (prompt_text != NULL) {
        const int len = (int) strlen(prompt_text);
        n_prompt      = -llama_tokenize(vocab, prompt_text, len, NULL, 0, true, false);
        if (n_prompt <= 0) {
            die("%s", "cannot tokenize the prompt");
        }
        prompt = malloc(sizeof(llama_token) * (size_t) n_prompt);
        if (llama_tokenize(vocab, prompt_text, len, prompt, n_prompt, true, false) != n_prompt) {
            die("%s", "cannot tokenize the prompt");
        }
    } else {
        // Deterministic synthetic prompt: BOS (if the model adds one), then (7*i+3) % n_vocab,
        // skipping control and unknown tokens.
        n_prompt = prompt_ntok;
        prompt   = malloc(sizeof(llama_token) * (size_t) (n_prompt > 0 ? n_prompt : 1));
        int k    = 0;
        if (k < n_prompt && llama_vocab_get_add_bos(vocab) && llama_vocab_bos(vocab) >= 0) {
            prompt[k++] = llama_vocab_bos(vocab);
        }
        for (int i = 0; k < n_prompt; i++) {
            const llama_token t = (llama_token) ((7L * i + 3) % n_vocab);
            if (!(llama_vocab_get_attr(vocab, t) & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_UNKNOWN))) {
                prompt[k++] = t;
            }
        }
    }
    if (n_prompt < 1) {
        die("%s", "the prompt needs at least one token");
    }
    // A context of 1024, or the prompt and the generated tokens rounded up to
    // 256 where they need more (decode at depth, docs/perf.md step 39).
    if (n_prompt + n_gen > 1 << 20) {
        die("%s", "prompt plus generated tokens exceed 1048576");
    }
    if (n_prompt + n_gen > n_ctx) {
        n_ctx = (n_prompt + n_gen + 255) / 256 * 256;
    }
    if (g_verbose) {
        fprintf(stderr, "greedy: %d prompt tokens:", n_prompt);
        for (int i = 0; i < n_prompt; i++) {
            fprintf(stderr, " %d", prompt[i]);
        }
        fprintf(stderr, "\n");
    }

    struct llama_context_params cparams = llama_context_default_params();
    cparams.n_ctx                       = n_ctx;
    cparams.n_batch                     = (uint32_t) n_batch;
    cparams.n_ubatch                    = (uint32_t) n_batch;
    cparams.n_threads                   = n_threads;
    cparams.n_threads_batch             = n_threads;
    cparams.flash_attn_type             = fa;
    cparams.type_k                      = type_k;
    cparams.type_v                      = type_v;
    cparams.no_perf                     = true;
    cparams.embeddings                  = embd_path != NULL;
    struct llama_context * ctx          = llama_init_from_model(model, cparams);
    if (ctx == NULL) {
        die("%s", "cannot create the llama context");
    }

    // Optional warm-up (not timed): the prompt and one generation step, then an empty cache.
    // Backends that compile kernels on first use pay for it here.
    if (warmup) {
        for (int i = 0; i < n_prompt; i += n_batch) {
            const int n = n_prompt - i < n_batch ? n_prompt - i : n_batch;
            if (llama_decode(ctx, llama_batch_get_one(prompt + i, n)) != 0) {
                die("%s", "llama_decode failed during the warm-up");
            }
        }
        llama_token t = prompt[0];
        if (llama_decode(ctx, llama_batch_get_one(&t, 1)) != 0) {
            die("%s", "llama_decode failed during the warm-up");
        }
        llama_memory_clear(llama_get_memory(ctx), true);
    }

    // Prompt in batches of n_batch.
    const double t0 = now_s();
    for (int i = 0; i < n_prompt; i += n_batch) {
        const int n = n_prompt - i < n_batch ? n_prompt - i : n_batch;
        if (llama_decode(ctx, llama_batch_get_one(prompt + i, n)) != 0) {
            die("%s", "llama_decode failed on the prompt");
        }
    }
    const double t1 = now_s();

    FILE * logits_file = NULL;
    if (logits_path != NULL) {
        logits_file = fopen(logits_path, "wb");
        if (logits_file == NULL) {
            die("cannot write %s", logits_path);
        }
    }

    FILE *    embd_file = NULL;
    const int n_embd    = llama_model_n_embd(model);
    if (embd_path != NULL) {
        embd_file = fopen(embd_path, "wb");
        if (embd_file == NULL) {
            die("cannot write %s", embd_path);
        }
    }

    // Greedy generation, one token per llama_decode.
    llama_token * out        = malloc(sizeof(llama_token) * (size_t) (n_gen > 0 ? n_gen : 1));
    double *      margins    = malloc(sizeof(double) * (size_t) (n_gen > 0 ? n_gen : 1));
    double        min_margin = INFINITY;
    int           min_step   = -1;
    double        logit_std  = 0.0;
    double        t_first    = 0.0;
    for (int s = 0; s < n_gen; s++) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        if (logits == NULL) {
            die("%s", "no logits");
        }
        if (s == 0) {
            t_first = now_s();
        }
        if (logits_file != NULL && fwrite(logits, sizeof(float), (size_t) n_vocab, logits_file) != (size_t) n_vocab) {
            die("cannot write %s", logits_path);
        }
        if (embd_file != NULL) {
            const float * embd = llama_get_embeddings_ith(ctx, -1);
            if (embd == NULL) {
                die("%s", "no embeddings");
            }
            if (fwrite(embd, sizeof(float), (size_t) n_embd, embd_file) != (size_t) n_embd) {
                die("cannot write %s", embd_path);
            }
        }
        int   best = 0;
        float b1 = -INFINITY, b2 = -INFINITY;
        for (int j = 0; j < n_vocab; j++) {
            const float l = logits[j];
            if (isnan(l)) {
                die("%s", "NaN in the logits");
            }
            if (l > b1) {
                b2   = b1;
                b1   = l;
                best = j;
            } else if (l > b2) {
                b2 = l;
            }
        }
        if (s == 0) {
            double sum = 0, sum2 = 0;
            for (int j = 0; j < n_vocab; j++) {
                sum += logits[j];
                sum2 += (double) logits[j] * logits[j];
            }
            const double mean = sum / n_vocab;
            logit_std         = sqrt(fmax(0.0, sum2 / n_vocab - mean * mean));
        }
        margins[s] = (double) b1 - b2;
        if (print_top > 0) {  // diagnostics: the K largest logits of this step, on stderr
            fprintf(stderr, "step %d top:", s);
            float last = INFINITY;
            for (int k = 0; k < print_top; k++) {
                int   arg = -1;
                float val = -INFINITY;
                for (int j = 0; j < n_vocab; j++) {
                    if (logits[j] < last && logits[j] > val) {
                        val = logits[j];
                        arg = j;
                    }
                }
                if (arg < 0) {
                    break;
                }
                fprintf(stderr, " %d:%.3f", arg, val);
                last = val;
            }
            fprintf(stderr, "\n");
        }
        if ((double) b1 - b2 < min_margin) {
            min_margin = (double) b1 - b2;
            min_step   = s;
        }
        out[s] = best;
        if (s + 1 < n_gen && llama_decode(ctx, llama_batch_get_one(&out[s], 1)) != 0) {
            if (!retry || llama_decode(ctx, llama_batch_get_one(&out[s], 1)) != 0) {
                die("%s", "llama_decode failed while generating");
            }
            retried++;
        }
    }
    const double t2 = now_s();
    if (logits_file != NULL && fclose(logits_file) != 0) {
        die("cannot write %s", logits_path);
    }
    if (embd_file != NULL && fclose(embd_file) != 0) {
        die("cannot write %s", embd_path);
    }

    if (retry) {
        printf("retried: %d\n", retried);
    }
    printf("tokens:");
    for (int s = 0; s < n_gen; s++) {
        printf(" %d", out[s]);
    }
    printf("\ntext: ");
    for (int s = 0; s < n_gen; s++) {
        char      piece[256];
        const int n = llama_token_to_piece(vocab, out[s], piece, (int) sizeof(piece), 0, false);
        for (int c = 0; c < n; c++) {
            const unsigned char ch = (unsigned char) piece[c];
            if (ch < 0x20 || ch == 0x7f) {
                printf("\\x%02x", ch);
            } else {
                putchar(ch);
            }
        }
    }
    printf("\nmargin: min %.4f at step %d, logit std %.3f\n", min_margin, min_step, logit_std);
    if (print_margins) {
        printf("margins:");
        for (int s = 0; s < n_gen; s++) {
            printf(" %.3f", margins[s]);
        }
        printf("\n");
    }
    // The last generated token is not decoded, so n_gen tokens cost n_gen - 1 decodes after the
    // prompt's logits (the first token comes from the prompt).
    const double pp = (t1 - t0) > 0 ? n_prompt / (t1 - t0) : 0.0;
    const double tg = (n_gen > 1 && t2 - t1 > 0) ? (n_gen - 1) / (t2 - t1) : 0.0;
    printf("speed: prompt %.2f tok/s, decode %.2f tok/s\n", pp, tg);
    if (n_gen > 0) {
        // Time to first token beyond model load: context, graph reservation, kernel builds (or
        // the program cache), the prompt; the warm-up, if asked for, is included.
        printf("ttft: model load %.3f s, first token %.3f s after the load\n", t_loaded - t_start,
               t_first - t_loaded);
    }
    fflush(stdout);

    free(tensor_split);
    free(margins);
    free(out);
    free(prompt);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
