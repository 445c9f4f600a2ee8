// sp.h: the context over the world (sp.c): what the flags choose, the checks of what a run may do
// (each sentence naming the problem and the fix), the groups split from the world, their backend,
// and the bytes they sent. The context's type: layouts/context.h.
#pragma once
#include "../layouts/layouts.h"

// gather, every rank one sequence group, the default policy, one micro-batch
SpOptions sp_options_default(void);
// "dp 2 x sp 2, hybrid (ulysses 2 x ring 1)", or "sp 4, ring" without data parallelism, with
// ", grad-accum K" for K > 1 micro-batches (and ", exact (V blocks)", ", recompute"), into buf
const char *sp_layout_text(const SpOptions *o, int ranks, char *buf, size_t len);

// ---- the context (sp.c) -----------------------------------------------------------------------
// Checks that T tokens and `heads` heads can run over `ranks` ranks with these options (NULL, and
// *sp set up for rank `rank`, its groups split from `world` when that is not NULL, a collective;
// or the sentence naming the problem and the fix). With --device cuda and a world, it also picks
// this rank's GPU and the collectives' backend: NCCL when every rank of a machine has a GPU of
// its own and the build has NCCL, else MPI on host copies.
const char *sp_init(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o, int T,
                    int heads, char *buf, size_t len);
// sp_init for model m, or a usage error (usage.h) that names the problem; world may be NULL for a
// context that only sizes memory. An in-context model runs with the gather and all-to-all layouts,
// not under --exact.
void sp_setup(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
              const DiTConfig *m);
// sp_setup for sequences of T tokens (packs of images) instead of the model's square images
void sp_setup_tokens(SeqParallel *sp, Comm *world, int ranks, int rank, const SpOptions *o,
                     const DiTConfig *m, int T);
// NULL when every bug that o injects can run with these options on `ranks` ranks and, when m is
// not NULL, on model m (inject.h: each bug's layout and needs; sp_setup checks it first, sp_init
// the options' part); else the sentence naming what the first needs. Without m, the needs of the
// model and of packs are not asked (a probe's checkpoint and batch give them)
const char *sp_bugs_error(const SpOptions *o, const DiTConfig *m, int ranks, char *buf, size_t len);
// Where bug b runs: its layout and its needs ("all-to-all, --cond text"; "any layout")
const char *bug_where(const BugInfo *b, char *buf, size_t len);
// Every bug with where it runs ("local-kv (gather), ..., no-dp-allreduce (--sp below the ranks),
// ..."), in lines of at most `width` characters: the --help lists
const char *bug_help(char *buf, size_t len, int width);
// After sp_init, for model m: the tokens every rank holds in front of its shard in every block
// (in-context conditioning's, or joint attention's caption: dit_front_tokens); NULL,
// or the sentence when the options cannot run them (what sp_setup checks), sp_context_error's.
const char *sp_init_context(SeqParallel *sp, const SpOptions *o, const DiTConfig *m, char *buf, size_t len);
const char *sp_context_error(const SpOptions *o, const DiTConfig *m, char *buf, size_t len);
void sp_free(SeqParallel *sp);
// NULL when the device options can run here (a GPU for --device cuda, --tf32 only with cuda);
// else the sentence. sp_init checks it first; the flags' parser too.
const char *sp_device_error(const SpOptions *o, char *buf, size_t len);
// NULL when the --exact and precision options can run (--virtual-shards only with --exact,
// --grad-wire bf16 only with --precision bf16 and without --exact); else the sentence. sp_init checks it (and the policy, that the ranks divide the
// blocks); so does bugs before its first run.
const char *sp_exact_error(const SpOptions *o, char *buf, size_t len);
// "cpu", or "cuda (NVIDIA H200, collectives over NCCL)" and the like, into buf
const char *sp_device_text(const SeqParallel *sp, char *buf, size_t len);
// Bytes this rank sent over its groups (the layout's exchanges, and the images the probe gathers)
// and over the world (gradients and the loss) since sp_init or the last sp_reset_bytes
size_t sp_layout_bytes(const SeqParallel *sp);
size_t sp_world_bytes(const SeqParallel *sp);
void sp_reset_bytes(SeqParallel *sp);
