// checkpoint.h: DiT checkpoints in safetensors with the reference's state_dict names and layouts
// and the config in __metadata__ (settings.h), so a checkpoint loads into the PyTorch reference
// with load_state_dict(strict=True). Training state (Adam moments, step) goes to a second file
// named in the model's metadata, so the model file holds exactly the state_dict.
#pragma once
#include "../autograd/optim.h"
#include "../layers/dit.h"
#include "../core/arena.h"
#include "../core/safetensors.h"
#include "../parallel/transport/comm.h"
#include "settings.h" // the metadata's config keys and their text (the model's rows)

// Writes pos_embed and every parameter, taking the parameter values from `flat` (e.g. EMA weights,
// in the order the parameters were registered: a whole store's layout, ps_unpad) or from the
// model when flat is NULL. step >= 0 records the
// training step in the metadata, and optimizer_file (or NULL) where the Adam state is.
int ckpt_save_model(const DiT *m, const real *flat, const char *path, int step,
                    const char *optimizer_file, char *err, size_t len);
// Lays out *m (shapes only, nothing allocated) from path's config and checks every tensor's name,
// shape and dtype against it: 0 with *st open (st_open: the values stay in the file until
// ckpt_load_values reads them), or -1 with the problems in err, nothing to free. The config must
// be valid (the training flags' limits). Between the two the store may be split (--zero) and
// allocated as it will train, so that no rank ever holds the whole model.
int ckpt_open_model(SafeTensors *st, DiT *m, const char *path, char *err, size_t len);
// The values of st, a model file of m's layout, into m's allocated store, a unit at a time: each
// unit's tensors where they point, then kept (ps_keep_unit) as the parameters and pos_embed
// (params), as the EMA (ema), or as both. Load an EMA before the parameters: it passes through
// their place. -1 with a message naming the tensors that hold a NaN or an infinite value.
int ckpt_load_values(DiT *m, const SafeTensors *st, const char *path, bool params, bool ema,
                     char *err, size_t len);
// ckpt_open_model, a whole store allocated (no EMA), ckpt_load_values. On failure *m is left
// empty (nothing to free).
int ckpt_load_model(DiT *m, const char *path, char *err, size_t len);
// The EMA of an allocated m (whole or split) from path, a checkpoint of the same model, before its
// parameters are loaded (ckpt_load_values); on failure the EMA may hold part of the file.
int ckpt_load_ema(DiT *m, const char *path, char *err, size_t len);

// The training step a checkpoint records in its metadata, or -1 with a message.
int ckpt_step(const char *path, char *err, size_t len);

// Adam moments m and v (ps->total each: the store's own, or a sharded store's gathered) and step,
// for resuming bit-identically; `run` (e.g. "seed=0 batch=32") is stored and, on loading, must
// match the resuming run's.
int ckpt_save_optimizer(const ParamStore *ps, const real *m, const real *v, const AdamW *opt,
                        const char *run, const char *path, char *err, size_t len);
// A training run's state in folder dir: optimizer.safetensors, model.safetensors and, when the
// store keeps an EMA, ema.safetensors; with bf16 (--save-dtype bf16) the model and EMA files in
// BF16 for sharing, and their float values in the optimizer file ("master.params",
// "master.ema"), from which --resume takes them (ckpt_load_masters). The same files whatever
// --zero split the store over c's
// ranks. Every rank calls it, rank 0 writes: a unit at a time, each rank's pieces of the unit's
// moments (and at level 3 of its parameters and EMA) are gathered on rank 0 into `stage`, one
// buffer at a time, written and released, so rank 0 holds one unit beyond its own slices:
// `stage` has ckpt_stage_bytes (NULL, or any arena, on the other ranks). 0, or on rank 0 -1
// with a message (every file begun is ended or removed).
size_t ckpt_stage_bytes(const ParamStore *ps); // the largest unit, padded; 0 for a whole store
int ckpt_save_state(const DiT *m, const AdamW *opt, const char *run, int step, bool bf16, Comm *c,
                    Arena *stage, const char *dir, char *err, size_t len);

// Into a whole store (before ps_shard). Refuses moments with a NaN or infinite value.
int ckpt_load_optimizer(ParamStore *ps, AdamW *opt, const char *run, const char *path, char *err,
                        size_t len);
// The float master weights a --save-dtype bf16 run keeps in its optimizer file (path), into m's
// allocated store as ckpt_load_values puts a model file's: the EMA's too, first, when ema and the
// file has it (a store that kept none when saved keeps what the model files gave). 1 when the
// file holds none (a float save: the model files hold the weights), 0 when loaded, -1 with a
// message.
int ckpt_load_masters(DiT *m, const char *path, bool ema, char *err, size_t len);
