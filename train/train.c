// train.c: see train.h. One step: every rank builds its data group's images of the batch, runs the
// DiT on its token shard (sequence-parallel attention across ranks) and backpropagates, micro-batch
// by micro-batch (step.c), all-reduces the flat gradient buffer, and applies the same AdamW
// update, so parameters stay identical on every rank.
#include "train.h"
#include "../core/blas.h"
#include "../core/cpu.h"
#include "../core/check.h"
#include "../core/device.h"
#include "../core/safefile.h"
#include "../kernels/kernels.h"
#include "../kernels/run.h"
#include "../plan/budget.h"
#include "../run/checkpoint.h"
#include "../run/allowed.h"
#include "../run/config.h"
#include "../data/data.h"
#include "../run/flags.h"
#include "../run/lock.h"
#include "../run/losslog.h"
#include "../run/outfile.h"
#include "../plan/plan.h"
#include "sample.h"
#include "../parallel/mesh/step.h"
#include "../core/timing.h"
#include "../parallel/mesh/batch.h"
#include "../parallel/mesh/zero.h"
#include <cblas.h>
#include <errno.h>
#include <sched.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct Run {
    TrainConfig tc;
    Comm *comm;
    DiT m;     // on the host: initialized or resumed here, saved from here (with its EMA)
    DiT dev;   // --device cuda: the model on the GPU, which trains (copied to m to save)
    DiT *work; // the model that trains: &m, or &dev
    AdamW opt;
    Arena arena; // the steps' and the sampling's, on the side of work
    Data data;
    SeqParallel sp;
    SeqParallel sampling; // the context sampling draws in, when not sp's: packs (--max-tokens)
                          // or --sample-sizes (then its sequences are packs)
    LossLog log;
    char run_text[128]; // what a resumed run must share: seed and batch
} Run;

static void path_in(char *buf, size_t len, const char *dir, const char *file) {
    int n = snprintf(buf, len, "%s/%s", dir, file);
    CHECK(n > 0 && (size_t)n < len, "the path %s/%s is too long", dir, file);
}

// ---- start: fresh or resumed -------------------------------------------------------------------
// The model, the optimizer state, the EMA and the loss log of the run in --resume, checked against
// the flags and against each other, read into the store split as it will train (split): a unit
// and a rank's pieces at a time, so no rank holds the whole model
static void resume_run(Run *r, bool split) {
    TrainConfig *tc = &r->tc;
    char err[1024], model[PATH_LEN + 32], path[PATH_LEN + 32], a[64], b[64];
    SafeTensors st;
    path_in(model, sizeof model, tc->resume, "model.safetensors");
    if (ckpt_open_model(&st, &r->m, model, err, sizeof err)) usage_error("--resume: %s", err);
    for (int i = 0; i < DIT_CONFIG_FIELDS; i++) {
        dit_config_value(&r->m.cfg, i, a, sizeof a);
        dit_config_value(&tc->model, i, b, sizeof b);
        if (strcmp(a, b))
            usage_error("--resume: the checkpoint in %s has %s = %s but the flags give %s; "
                        "resume with the original run's model flags (see its config.json)",
                        tc->resume, dit_config_key(i), a, b);
    }
    int model_step = ckpt_step(model, err, sizeof err);
    if (split) sp_split_store(&r->sp, &r->m.ps, tc->parallel.zero);
    dit_alloc(&r->m, false, tc->ema > 0);
    path_in(path, sizeof path, tc->resume, "optimizer.safetensors");
    if (ckpt_load_optimizer(&r->m.ps, &r->opt, r->run_text, path, err, sizeof err))
        usage_error("--resume: %s", err);
    if (model_step != r->opt.step)
        usage_error("--resume: %s holds the model of step %d but the optimizer state of step "
                    "%d (a save was interrupted?); resume from a folder whose files agree",
                    tc->resume, model_step, r->opt.step);
    // the EMA first (it passes through the parameters' place); saved before the first step, or
    // none kept: it starts at the weights
    path_in(path, sizeof path, tc->resume, "ema.safetensors");
    bool ema_file = tc->ema > 0 && r->opt.step > 0;
    if (ema_file && access(path, F_OK))
        usage_error("--resume: %s has no ema.safetensors: was the run started with --ema 0? "
                    "Then resume it with --ema 0", tc->resume);
    if (ema_file && ckpt_load_ema(&r->m, path, err, sizeof err))
        usage_error("--resume: the EMA weights: %s", err);
    if (ema_file && ckpt_step(path, err, sizeof err) != r->opt.step)
        usage_error("--resume: %s holds EMA weights of another step than the optimizer "
                    "state (%d) (a save was interrupted?)", tc->resume, r->opt.step);
    if (ckpt_load_values(&r->m, &st, model, true, tc->ema > 0 && !ema_file, err, sizeof err))
        usage_error("--resume: %s", err);
    st_free(&st);
    // saved with --save-dtype bf16: the float weights (and EMA) from the optimizer file
    path_in(path, sizeof path, tc->resume, "optimizer.safetensors");
    if (ckpt_load_masters(&r->m, path, tc->ema > 0, err, sizeof err) < 0) usage_error("--resume: %s", err);
    path_in(path, sizeof path, tc->resume, "loss.csv");
    if (losslog_read(&r->log, path, err, sizeof err)) usage_error("--resume: %s", err);
    while (r->log.n && r->log.step[r->log.n - 1] > r->opt.step) r->log.n--;
}

// The folder of --resume, brought to whole saves (core/safefile.h: a save killed half-way is
// finished or rolled back) on rank 0 before any rank reads it. false when it holds no checkpoint
// yet: a run killed before its first save starts again from step 0.
static bool recover_run(Run *r) {
    const TrainConfig *tc = &r->tc;
    char err[1024], path[PATH_LEN + 32];
    struct stat sb;
    path_in(path, sizeof path, tc->resume, "config.json");
    const char *why = stat(tc->resume, &sb) ? (errno == ENOENT ? "does not exist" : "cannot be read")
                      : !S_ISDIR(sb.st_mode) ? "is not a folder"
                      : access(path, F_OK) ? "is not a run folder (it has no config.json)"
                      : NULL;
    if (why)
        usage_error("--resume: %s %s; give the --out folder of an earlier training run, or leave "
                    "out --resume to start a new one", tc->resume, why);
    int finished = 0, removed = 0;
    if (r->comm->rank == 0 && safefile_recover(tc->resume, &finished, &removed, err, sizeof err))
        usage_error("--resume: %s", err);
    if (finished) print0(r->comm, "--resume: finished a save that was interrupted (%d files)\n", finished);
    if (removed) print0(r->comm, "--resume: removed %d temporary file%s of an interrupted save\n",
                        removed, removed > 1 ? "s" : "");
    comm_barrier(r->comm);
    path_in(path, sizeof path, tc->resume, "model.safetensors");
    if (!access(path, F_OK)) return true;
    print0(r->comm, "--resume: %s holds no checkpoint yet (the run stopped before its first save); "
           "starting it from step 0\n", tc->resume);
    return false;
}

static void start_run(Run *r) {
    TrainConfig *tc = &r->tc;
    snprintf(r->run_text, sizeof r->run_text, "seed=%llu batch=%d", (unsigned long long)tc->seed,
             tc->batch);
    r->opt = adamw_default(tc->lr);
    r->opt.weight_decay = tc->weight_decay;
    r->opt.clip_norm = tc->clip_norm;
    bool split = tc->parallel.zero && r->comm->size > 1; // before the device
    if (tc->resume[0] && recover_run(r)) resume_run(r, split);
    else { // split before any memory is taken, initialised a unit at a time: never the whole model
        dit_layout(&r->m, &tc->model);
        if (split) sp_split_store(&r->sp, &r->m.ps, tc->parallel.zero);
        dit_alloc(&r->m, false, tc->ema > 0);
        dit_init(&r->m, tc->seed, tc->qkv_gain);
    }
    r->work = dit_place(&r->m, &r->dev, r->sp.cuda); // on the device: the model goes up, EMA too
}

// ---- outputs ---------------------------------------------------------------------------------
static void write_loss_files(Run *r) {
    char err[1024], path[PATH_LEN + 32];
    if (r->comm->rank != 0) return;
    path_in(path, sizeof path, r->tc.out, "loss.csv");
    SafeFile a;
    CHECK(!safefile_open(&a, path, err, sizeof err), "%s", err);
    fprintf(a.f, "step,loss\n");
    for (int i = 0; i < r->log.n; i++) fprintf(a.f, "%.0f,%.9g\n", r->log.step[i], r->log.loss[i]);
    CHECK(!safefile_commit(&a, !ferror(a.f), err, sizeof err), "%s", err);
    path_in(path, sizeof path, r->tc.out, "loss.png");
    const char *names[] = {"training loss"};
    char title[160];
    snprintf(title, sizeof title, "%s on %.80s, %d rank%s", r->tc.preset, r->tc.data, r->comm->size,
             r->comm->size > 1 ? "s" : "");
    CHECK(!losslog_plot(path, title, &r->log, names, 1, false, 0, err, sizeof err), "%s", err);
}

// the checkpoint and the loss log as one group (core/safefile.h): all are written before any is
// renamed into place, so a run folder holds files of one step and can be resumed, even when the
// job is killed while saving
static void save(Run *r, int step) {
    char err[1024], path[PATH_LEN + 32];
    ParamStore *ps = &r->m.ps;
    if (r->work != &r->m && (ps->shards > 1 || r->comm->rank == 0)) dit_copy(&r->m, r->work); // the host copy of what trained on the device
    bool writes = r->comm->rank == 0;
    Arena stage = {0}; // where rank 0 gathers each rank's pieces, a unit at a time
    if (writes) stage = arena_create(ckpt_stage_bytes(ps)), safefile_group_begin();
    int rc = ckpt_save_state(&r->m, &r->opt, r->run_text, step, r->tc.save_bf16, r->comm, writes ? &stage : NULL, r->tc.out, err, sizeof err);
    if (!writes) return;
    arena_destroy(&stage);
    CHECK(!rc, "%s", err);
    write_loss_files(r);
    CHECK(!safefile_group_end(err, sizeof err), "%s", err);
    if (!ps->ema) { // an average from an earlier --ema would not match this model any more
        path_in(path, sizeof path, r->tc.out, "ema.safetensors");
        remove(path);
    }
}

// sampling runs in a context of its own (Run.sampling)
static bool own_sampling(const TrainConfig *tc) { return tc->max_tokens || tc->sample_sizes.n; }

static void write_samples(Run *r, Arena *arena) {
    char err[1024], path[PATH_LEN + 32];
    if (!r->tc.samples_per_class) return;
    ParamStore *ps = &r->work->ps;
    real *saved = NULL;
    size_t bytes = ps_own_len(ps) * sizeof(real);
    if (ps->ema) { // sample with the EMA weights (copies on the host or the device, where they are)
        saved = xmalloc(bytes);
        copy_bytes(saved, ps->own, bytes);
        copy_bytes(ps->own, ps->ema, bytes);
        if (ps->level >= 3) sp_gather_params(&r->sp, ps);
    }
    path_in(path, sizeof path, r->tc.out, "samples.png");
    int rc = sample_grid(r->work, own_sampling(&r->tc) ? &r->sampling : &r->sp, arena, &r->data, NULL, 0,
                         r->tc.samples_per_class, &r->tc.sample_sizes, r->tc.sample_steps,
                         r->tc.cfg_scale, r->tc.seed, path, err, sizeof err);
    if (saved) {
        copy_bytes(ps->own, saved, bytes);
        if (ps->level >= 3) sp_gather_params(&r->sp, ps);
        free(saved);
    }
    if (rc) {
        char msg[4 * PATH_LEN + 1536], later[2 * PATH_LEN + 96] = "";
        if (rc == SAMPLE_WRITE_FAILED)
            snprintf(later, sizeof later, ", and train/train sample --ckpt %s --out S.png draws the "
                     "samples later", r->tc.out);
        snprintf(msg, sizeof msg, "%s; the checkpoint of step %d is saved in %s%s", err, r->opt.step,
                 r->tc.out, later);
        comm_stop_all(msg, 1);
    }
}

// ---- the loop ----------------------------------------------------------------------------------
// One optimizer step; returns the global loss.
static double train_step(Run *r, Arena *arena, Batch *b, int step, double *grad_norm) {
    batch_make(b, &r->data, r->tc.seed, r->tc.model.text ? r->tc.text_dropout : r->tc.model.class_dropout_prob,
               r->tc.model.num_classes, step - 1);
    arena_reset(arena);
    ParamStore *ps = &r->work->ps;
    Tensor *t = b->pack ? tensor_rows(arena, b->t, 0, b->pack->n) : b->t; // packs: per image
    double loss = step_gradients(r->work, &r->sp, arena, b->xt, t, b->y, b->v, r->tc.batch, b->pack,
                                 NULL);
    *grad_norm = sp_optimizer_step(&r->sp, &r->opt, ps);
    if (ps->ema) RUN(ps->device, ema_update, ps->ema, ps->own, ps_own_len(ps), ema_decay(r->tc.ema, r->opt.step));
    return loss;
}

// The start line (the model, the mesh, the batch, the steps and the folder), then the device or the
// CPU's kernels. first: the first step, 0 when the checkpoint's (a dry run of --resume)
static void print_start(const Run *r, size_t params, int first) {
    const TrainConfig *tc = &r->tc;
    const Comm *c = r->comm;
    char layout[128], steps[64];
    if (first) snprintf(steps, sizeof steps, "steps %d..%d", first, tc->steps);
    else snprintf(steps, sizeof steps, "steps from the checkpoint's to %d", tc->steps);
    char zero[96] = "";
    if (tc->parallel.zero) snprintf(zero, sizeof zero, ", zero %d", tc->parallel.zero);
    if (tc->resume[0] && tc->resumed_zero != tc->parallel.zero) // the files are whole: each rank takes its share
        snprintf(zero + strlen(zero), sizeof zero - strlen(zero), "%s (the run saved under --zero %d; "
                 "its state %s)", tc->parallel.zero ? "" : ", zero 0", tc->resumed_zero, tc->parallel.zero ? "split anew" : "whole again");
    print0(c, "%s%s: %zu parameters, %d tokens per %s; %d rank%s: %s%s (%d tokens each, padded to "
           "%d); batch %d, %s, %s -> %s\n", dry_run ? "dry run: " : "", tc->preset, params,
           tc->max_tokens ? tc->max_tokens : dit_tokens(&tc->model),
           tc->max_tokens ? "pack of images at their own sizes" : "image", c->size, c->size > 1 ? "s" : "",
           sp_layout_text(&tc->parallel, c->size, layout, sizeof layout), zero,
           r->sp.shard.n, r->sp.shard.T_pad, tc->batch, tc->data, steps, tc->out);
    if (r->sp.cuda) print0(c, "device: %s\n", sp_device_text(&r->sp, layout, sizeof layout));
    else {
        char cpu[256];
        print0(c, "GEMM: %s; %d thread%s per rank\nCPU: %s\n", blas_setup(), kernel_threads(),
               kernel_threads() > 1 ? "s" : "", cpu_text(cpu, sizeof cpu));
        if (tc->parallel.bf16) print0(c, "bf16: %s\n", blas_bf16_text(cpu, sizeof cpu));
    }
}

// Checks and opens everything a run needs (memory, data, the checkpoint to resume), then writes
// config.json: the first file, written only when all of that worked
static void setup(Run *r) {
    TrainConfig *tc = &r->tc;
    Comm *c = r->comm;
    char text[4096], err[1024], path[PATH_LEN + 32];
    train_config_text(tc, text, sizeof text);
    comm_check_same(c, "training configuration (flags)", text);
    if (c->rank == 0) { // rank 0 writes the run; a job writing the folder now refuses this one
        run_folder_lock("--out", tc->out, false);
        if (tc->resume[0]) run_folder_lock("--resume", tc->resume, false);
        out_folder_check("--out", tc->out, tc->resume);
        struct stat sb; // a resumed folder is held before start_run finishes its interrupted save
        if (tc->resume[0] && !stat(tc->out, &sb) && S_ISDIR(sb.st_mode)) run_folder_lock("--out", tc->out, true);
    }
    if (tc->threads) {
        cpu_set_t mask;
        if (!sched_getaffinity(0, sizeof mask, &mask) && CPU_COUNT(&mask) < tc->threads)
            print0(c, "note: --threads %d but each rank may run on only %d core%s (mpirun binds ranks "
                   "to cores; add --bind-to none to mpirun)\n", tc->threads, CPU_COUNT(&mask),
                   CPU_COUNT(&mask) > 1 ? "s" : "");
        openblas_set_num_threads(tc->threads);
    }
    run_check(tc, FOR_TRAIN, c->size);
    if (!dry_run_missing("--data", data_procedural(tc->data) ? NULL : tc->data, c->rank == 0) &&
        data_open(&r->data, tc->data, tc->model.input_size, dit_frames(&tc->model), tc->model.in_channels,
                  tc->model.num_classes, err, sizeof err))
        usage_error("--data: %s", err);
    if (tc->model.text && data_captions(&r->data, tc->model.text_len, err, sizeof err))
        usage_error("--cond text: %s", err);
    r->data.max_tokens = tc->max_tokens, r->data.patch = tc->model.patch_size;
    if (tc->max_tokens && !data_procedural(tc->data)) tc->parallel.pack_images = data_pack_images(&r->data);
    // every rank, as they all agree (after the data: a row of packs holds its images' captions)
    if (tc->parallel.layout == SP_AUTO) plan_choose(tc, c);
    char memory[512];
    budget_train_check(tc, c->size, comm_node_size(c), memory, sizeof memory); // packs: rows no longer than the images'
    // the model's config is the flags' (a resumed checkpoint must match them)
    sp_setup_tokens(&r->sp, c, c->size, c->rank, &tc->parallel, &tc->model,
                    tc->max_tokens ? tc->max_tokens : dit_tokens(&tc->model));
    if (own_sampling(tc)) {
        SpOptions o = tc->parallel;
        o.packs = o.packs || tc->sample_sizes.n;
        o.pack_images = 0; // its rows hold the samples' sizes, not the folder's images
        sp_setup(&r->sampling, c, c->size, c->rank, &o, &tc->model);
    }
    if (dry_run) { // what would run, the memory check passed; nothing loaded, made or written
        DiT shape;
        dit_layout(&shape, &tc->model);
        print_start(r, shape.ps.total, tc->resume[0] ? 0 : 1);
        dit_free(&shape);
        print0(c, "dry run: %s\ndry run: every flag checked; nothing trained or written\n", memory);
        return;
    }
    start_run(r);
    if (r->opt.step >= tc->steps)
        usage_error("--resume: %s is already at step %d; pass --steps above %d to train further",
                    tc->resume, r->opt.step, r->opt.step);
    // every rank has its memory (a GPU's may be too small) before the run folder is written
    size_t bytes = budget_train_arena(&r->sp, tc);
    if (own_sampling(tc)) { // and sampling's
        size_t sampling = budget_train_arena(&r->sampling, tc);
        bytes = sampling > bytes ? sampling : bytes;
    }
    r->arena = arena_create_on(r->sp.cuda, bytes, r->sp.exact ? bytes : 0); // --exact: sums on the host
    comm_barrier(c);
    if (c->rank == 0) {
        run_folder_lock("--out", tc->out, true); // made and locked before the first write
        out_folder_check("--out", tc->out, tc->resume); // under the lock: no run written since
        path_in(path, sizeof path, tc->out, "config.json");
        tc->ranks = c->size;
        CHECK(!train_config_write_json(tc, path, err, sizeof err), "%s", err);
    }
    comm_barrier(c);
    print_start(r, r->m.ps.total, r->opt.step + 1);
}

// A loss that is NaN or infinite stops every rank (they all see the same global loss): loss.csv
// keeps the finite steps, the last checkpoint stays, and the sentence says what to change
static void stop_diverged(Run *r, int step, double loss, int saved_step) {
    write_loss_files(r); // the finite steps (rank 0)
    if (r->comm->rank == 0) {
        char clip[96], kept[PATH_LEN + 96];
        if (r->tc.clip_norm > 0)
            snprintf(clip, sizeof clip, "a smaller --clip-norm (now %g; smaller clips harder)", r->tc.clip_norm);
        else snprintf(clip, sizeof clip, "clipping with --clip-norm 1 (now off)");
        if (saved_step) snprintf(kept, sizeof kept, "the checkpoint of step %d in %s is kept (--resume "
                                 "continues from it)", saved_step, r->tc.out);
        else snprintf(kept, sizeof kept, "no checkpoint was saved before it");
        fprintf(stderr, "error: the loss became %s at step %d: training diverged; lower --lr (now %g) "
                "or use %s; %s/loss.csv holds the steps before it, and %s\n",
                loss != loss ? "NaN" : "infinite", step, r->tc.lr, clip, r->tc.out, kept);
    }
    comm_barrier(r->comm);
    comm_finalize();
    exit(1);
}

// Saves every --save-every steps or, by default, every SAVE_MINUTES of wall time (rank 0's clock:
// rank 0 alone writes)
#define SAVE_MINUTES 10
static bool save_due(const Run *r, int step, double since_save) {
    if (step >= r->tc.steps) return false; // the end saves anyway
    if (r->tc.save_every > 0) return step % r->tc.save_every == 0;
    return r->tc.save_every < 0 && since_save >= SAVE_MINUTES * 60;
}

// The steps; returns the seconds they took
static double train_loop(Run *r, Arena *arena) {
    const TrainConfig *tc = &r->tc;
    int first_image, images;
    char err[512];
    CHECK(!sp_batch_slice(&r->sp, tc->batch, &first_image, &images, err, sizeof err), "%s", err);
    Batch batch;
    if (tc->max_tokens) // rows of packs, every rank all of them
        batch = batch_alloc_packs(first_image, images, tc->batch, tc->model.in_channels, dit_patch_t(&tc->model),
                                  tc->model.patch_size, tc->max_tokens, tc->model.text ? tc->model.text_len : 1);
    else {
        batch = batch_alloc(first_image, images, tc->batch, tc->model.in_channels, dit_frames(&tc->model),
                            tc->model.input_size, tc->model.text ? tc->model.text_len : 1);
        const SeqShard *sh = &r->sp.shard; // this rank reads the pixels of its tokens only
        batch_rows_of_tokens(&batch, sh->t0, sh->n, sh->T, dit_patch_t(&tc->model), tc->model.patch_size);
    }
    int first = r->opt.step + 1, step_last = first - 1, saved_step = r->opt.step;
    double t0 = now_seconds(), t_last = t0, t_save = t0; // the rate is measured since the last line
    for (int step = first; step <= tc->steps; step++) {
        double gnorm, loss = train_step(r, arena, &batch, step, &gnorm);
        if (!isfinite(loss)) stop_diverged(r, step, loss, saved_step);
        losslog_add(&r->log, step, loss);
        if (step % tc->log_every == 0 || step == tc->steps || step == first) {
            double t = now_seconds(), per_step = (t - t_last) / (step - step_last);
            char eta[32], since[32], ago[64] = "not yet";
            t_last = t, step_last = step;
            if (saved_step)
                snprintf(ago, sizeof ago, "step %d, %s ago", saved_step,
                         duration_text(t - t_save, since, sizeof since));
            print0(r->comm, "step %*d/%d | loss %.5f | grad norm %.3f | %.0f tok/s | ETA %s | saved %s\n",
                   (int)snprintf(NULL, 0, "%d", tc->steps), step, tc->steps, loss, gnorm,
                   tc->batch * (tc->max_tokens ? tc->max_tokens : dit_tokens(&tc->model)) / per_step,
                   duration_text(per_step * (tc->steps - step), eta, sizeof eta), ago);
        }
        if (save_due(r, step, now_seconds() - t_save)) save(r, step), saved_step = step, t_save = now_seconds();
        if (tc->sample_every && step % tc->sample_every == 0 && step < tc->steps) write_samples(r, arena);
    }
    batch_free(&batch);
    return now_seconds() - t0;
}

int train_main(int argc, char **argv, Comm *c) {
    Run r = {.comm = c};
    TrainConfig *tc = &r.tc;
    if (!train_config_parse(tc, argc, argv, c->rank)) return 0;
    setup(&r);
    if (dry_run) {
        sp_free(&r.sp);
        if (own_sampling(tc)) sp_free(&r.sampling);
        data_close(&r.data);
        return 0;
    }
    Arena *arena = &r.arena;
    int first = r.opt.step + 1, steps = tc->steps - first + 1;
    sp_reset_bytes(&r.sp);
    double elapsed = train_loop(&r, arena);
    double layout_mib = sp_layout_bytes(&r.sp) / 1048576.0 / steps, world_mib = sp_world_bytes(&r.sp) / 1048576.0 / steps;
    save(&r, r.opt.step);
    size_t train_peak = arena->peak;
    arena_reset(arena), arena_reset_peak(arena);
    write_samples(&r, arena);
    print0(c, "done: %d steps in %.3fs (%.2f steps/s), final loss %.5f, peak activation memory "
           "%.1f MiB per rank (sampling %.1f MiB), sent %.3f MiB per step and rank (attention %.3f, "
           "gradients %.3f); wrote %s/{config.json,loss.csv,loss.png,model.safetensors,"
           "optimizer.safetensors%s%s}\n", steps, elapsed, steps / (elapsed > 0 ? elapsed : 1),
           r.log.n ? r.log.loss[r.log.n - 1] : 0.0, train_peak / 1048576.0, arena->peak / 1048576.0,
           layout_mib + world_mib, layout_mib, world_mib, tc->out, r.m.ps.ema ? ",ema.safetensors" : "",
           !tc->samples_per_class ? "" : dit_frames(&tc->model) > 1 ? ",samples.png,samples.gif" : ",samples.png");
    { // what the step's side holds (the GPU with cuda)
        const ParamStore *ps = &r.work->ps;
        double MiB = 1048576.0, weights = ps_weight_reals(ps) * sizeof(real) / MiB;
        double moments = 2.0 * ps->chunk * sizeof(real) / MiB, ema = ps->ema ? ps_own_len(ps) * sizeof(real) / MiB : 0;
        double peak = (train_peak > arena->peak ? train_peak : arena->peak) / MiB;
        double pos = r.work->pos_embed.size * sizeof(real) / MiB;
        char share[64] = "";
        if (ps->shards > 1) snprintf(share, sizeof share, " (1/%d of them: --zero %d)", ps->shards, ps->level);
        print0(c, "%smemory: at most %.1f MiB per rank: the arena's peak %.1f MiB, parameters and "
               "gradients %.1f MiB, Adam moments %.1f MiB%s, EMA %.1f MiB, pos_embed %.1f MiB\n",
               r.sp.cuda ? "device " : "", peak + weights + moments + ema + pos, peak, weights,
               moments, share, ema, pos);
    }
    comm_print_peak_memory(c);
    arena_destroy(arena);
    sp_free(&r.sp);
    if (own_sampling(&r.tc)) sp_free(&r.sampling);
    data_close(&r.data);
    losslog_free(&r.log);
    if (r.work != &r.m) dit_free(r.work);
    dit_free(&r.m);
    return 0;
}
