/*
 * model.h - the text classifiers gantry-worker trains: a Transformer encoder and a bag-of-n-grams
 * baseline, on the CPU kernels (kernels/).
 *
 * Transformer (MODEL_TRANSFORMER), pre-LN like GPT-2 but bidirectional (no causal mask):
 *   x = wte[tokens] + wpe[positions]                                  (B,T,C)
 *   for each layer: x = x + Wo attn(LN1(x)) ; x = x + W2 gelu(W1 LN2(x))
 *   h = LNf(x) ; p = meanpool(h over real tokens) or h[:,0] (CLS) ; logits = Wc p + bc
 * Pre-LN is chosen because it trains stably from scratch without a warmup-sensitive post-LN
 * stack; there is no dropout. GELU is the tanh approximation. Attention ignores padding keys (see
 * kernels/attention.h). The exact same network is built in PyTorch by hack/torch_ref.py.
 *
 * Bag of n-grams (MODEL_NGRAM), fastText-like: the ids of a sequence's tokens (unigrams) and of
 * its hashed bigrams (vocab + hash(a, b) % buckets) index one embedding table (vocab + buckets,
 * hidden); their mean goes through a linear classifier.
 *
 * Memory, as in llm.c: all parameters live in ONE contiguous float buffer (and the gradients in
 * another of the same layout), carved into named tensors; activations are one more buffer sized
 * for (max_batch, max_seq_len) at model_init(). Initialisation is deterministic from a seed
 * (splitmix64 + Box-Muller, mirrored by hack/torch_ref.py): weights N(0, 0.02), residual
 * projections N(0, 0.02/sqrt(2 layers)), LayerNorm weight 1, biases 0.
 * Not thread-safe: one model per training loop; the kernels thread internally.
 */
#ifndef GANTRY_MODEL_H
#define GANTRY_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MODEL_MAX_TENSORS 24
#define MODEL_NAME_MAX 24

enum model_kind { MODEL_TRANSFORMER = 0, MODEL_NGRAM = 1 };

/* Units of the backward (model_arm_ready): 0 the head, 1..L the layers from the last down, L+1
 * the embeddings (train_plan.h lists their tensors). The n-gram model has 0 layers: 2 units. */
#define MODEL_UNITS(layers) ((layers) + 2)
typedef void (*model_ready_fn)(void *ctx, int unit);
enum model_pool { MODEL_POOL_MEAN = 0, MODEL_POOL_CLS = 1 };

struct model_config {
    enum model_kind kind;
    int vocab;       /* V: token ids are in [0, vocab) */
    int classes;     /* K >= 2 */
    int max_seq_len; /* maxT: positions (transformer), longest sequence accepted */
    int hidden;      /* C: model width (n-gram: embedding dimension) */
    int layers;      /* L (transformer) */
    int heads;       /* NH, divides hidden (transformer) */
    int ffn;         /* F: MLP width (transformer), usually 4 * hidden */
    enum model_pool pool;
    int buckets; /* hashed bigram buckets (n-gram) */
};

/* One named tensor inside the parameter buffer. */
struct model_tensor {
    char name[MODEL_NAME_MAX];
    size_t offset, count; /* in floats */
    int ndim, shape[3];
    bool decay; /* AdamW weight decay applies (matrices and embeddings, not biases or norms) */
};

/* Pointers into one buffer: m->p into params, m->g into grads (same layout). Per-layer tensors
 * are stacked: ln1w is (L, C), qkvw (L, 3C, C), and so on. Unused ones are NULL. */
struct model_params {
    float *wte, *wpe;                                 /* (V,C), (maxT,C) */
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb;
    float *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
    float *lnfw, *lnfb;                               /* (C) */
    float *clsw, *clsb;                               /* (K,C), (K) */
    float *emb;                                       /* n-gram: (V + buckets, C) */
};

struct model {
    struct model_config cfg;
    int max_batch;
    float *params, *grads; /* n_params floats each: the single buffers */
    size_t n_params;
    struct model_params p, g;
    struct model_tensor tensors[MODEL_MAX_TENSORS];
    int n_tensors;
    struct model_acts *a; /* activations and their gradients (model.c), one buffer */
    /* Set by the last model_forward(): */
    int B, T;
    const int *tokens, *len, *labels; /* borrowed until the backward */
    float *logits;                    /* (B,K) borrowed view into acts */
    float *probs;                     /* (B,K) softmax of logits */
    float *losses;                    /* (B) per example; only with labels */
    int *ngram_ids, *ngram_count;     /* n-gram bags (B, 2*maxT) and counts (B) */
    /* The loss that model_forward with labels computes and model_backward differentiates (the
     * training loops set them; 0 and NULL, the defaults: the plain cross-entropy): label
     * smoothing, and class weights (classes floats, borrowed) multiplying each example's loss
     * (kernels/crossentropy.h). */
    float label_smoothing;
    const float *class_weight;
    /* Multi-label classification (0: single-label): labels are (B, label_words) bit sets and the
     * loss is the sigmoid binary cross-entropy (kernels/crossentropy.h's bce_*); probs are then
     * each class's sigmoid. MODEL_TARGETS_REAL: regression (classes 1), labels are (B) floats'
     * bits, the loss the squared error, probs the outputs themselves. Set by whoever loads the
     * model for that task. */
    int label_words;
    model_ready_fn ready;             /* armed for the next model_backward (model_arm_ready) */
    void *ready_ctx;
    bool ready_each_layer;
};

#define MODEL_TARGETS_REAL (-1) /* label_words of a regression model (dataset.h's value) */

/* Checks cfg; on error writes "field: why, what to do" to err and returns -1. */
int model_config_check(const struct model_config *cfg, char *err, size_t errlen);

/* Floating-point operations of one training step (forward + backward = 3 x forward) of the
 * Transformer on a (B, T) batch, counted as computed: the GEMMs (2 x rows x in x out each:
 * qkv, attention projection, the two MLP layers per layer; the classifier), and attention's
 * two T x T products per layer (4 x B x T x T x C), padding included; elementwise work and
 * embedding lookups are not counted. The numerator of MFU (gpu_bench, the GPU loop's logs). */
double model_step_flops(const struct model_config *cfg, int B, int T);

/* Allocates and initialises from seed. 0, or -1 with err set (bad config). model_cleanup()
 * frees everything; the model is not usable after a failed init (cleanup is still safe). */
int model_init(struct model *m, const struct model_config *cfg, int max_batch, uint64_t seed,
               char *err, size_t errlen);
/* The number of parameters cfg (checked by model_config_check) has, without allocating them. */
size_t model_param_count(const struct model_config *cfg);

/* Like model_init, but the parameters are left zero: for loading them (gantry-predict), which
 * skips drawing millions of random numbers only to overwrite them. */
int model_alloc(struct model *m, const struct model_config *cfg, int max_batch, char *err,
                size_t errlen);
void model_cleanup(struct model *m);

/* Re-draws all parameters from seed (the same values model_init gives for that seed). */
void model_init_params(struct model *m, uint64_t seed);

/* Forward on tokens (B,T) row-major, len (B) real tokens (1..T; positions >= len are padding),
 * labels (B) (multi-label: (B, label_words) bit sets; regression: (B) floats' bits) or NULL.
 * B <= max_batch, T <= max_seq_len. Returns the mean loss over the batch when labels is given,
 * else 0. tokens/len/labels are borrowed until model_backward(). */
float model_forward(struct model *m, const int *tokens, const int *len, const int *labels, int B,
                    int T);

void model_zero_grad(struct model *m);

/* Backward of the last model_forward (which had labels): grads += d(loss_scale * sum of
 * per-example losses). For a mean over B examples and A accumulation steps, loss_scale = 1/(B*A). */
void model_backward(struct model *m, float loss_scale);

/*
 * Gradients ready during backward, for an all-reduce that overlaps it: the NEXT model_backward()
 * calls fn(ctx, u) for u = 0, 1, ..., MODEL_UNITS(L) - 1 in that order, each once unit u's
 * parameter gradients in m->grads are final (nothing in this backward writes them again), then
 * disarms. The hook runs on the calling thread, outside the kernels' parallel regions, and should
 * return quickly (hand the unit to another thread); m->grads must not be written by anyone else
 * until the backward returns. Arm before the LAST micro-batch of a step only: earlier backwards
 * still add to every unit. Unarmed, the backward is exactly as before (same work, same bits).
 * each_layer: a batch of more than 4 sequences normally takes each group of 4 through every layer
 * (cache-friendly), so no layer is final before all are, and the layer units then fire together
 * once the last one is; with each_layer the groups go through one layer at a time instead, so
 * each layer fires as soon as it is done, for ~3 % more backward time on the CPU (measured at
 * batch 16-32, 2-4 layers). Ask for it only when a bucket ends between layers. The sums, and so
 * the bits, are the same either way.
 */
void model_arm_ready(struct model *m, model_ready_fn fn, void *ctx, bool each_layer);

/* Tensor by name ("qkvw"), or NULL. */
const struct model_tensor *model_find_tensor(const struct model *m, const char *name);

/* 64-bit bigram hash used by the n-gram model (exposed for tests and the Python mirror). */
uint64_t model_bigram_hash(int a, int b);

/* The n-gram model's bag of one example of len tokens: the token ids, then vocab + hash % buckets
 * of each adjacent pair, into ids (room for 2 * len); returns how many (2 * len - 1, or 0). The
 * CPU model and the device model's upload (model_gpu.cu) both build their bags with it. */
int model_ngram_bag(const struct model_config *c, const int *tok, int len, int *ids);

#endif /* GANTRY_MODEL_H */
