/* CHANGES since the first commit (for the server helper):
 * - passages on both sides (lib/passages.h): nd_shingle (public),
 *   nd_sketch_shingles() (a sketched text's shingles and spans, per mode),
 *   nd_sketch_shingle_text() (tokenize and shingle the own mode only, no
 *   sketch: a source read for its passages), nd_sketch_own_mode().
 * - core rule: nd_sketch.pos / .positioned (where each value's shingle
 *   first occurs in a sketched TEXT; not encoded, so a decoded sketch has
 *   none) and nd_sketch_estimate.core_found / .core_n; nd_verdict_params
 *   .min_core / .min_containment_core (set by nd_verdict_params_default();
 *   0 = off). A query's nd_sketch carries its positions wherever it is
 *   copied (an import line's), so every path judges a text alike.
 * - folds: nd_sketch_info.integrity (lib/fold.h nd_integrity) counts what
 *   the folds read differently in the text (invisible, lookalike,
 *   traditional, han); filled by nd_sketch_text(), nd_sketch_text_modes()
 *   and nd_sketch_query() when info is not NULL. nd-sketch-2.
 * - 05:45 nd_sketch.reserved is now nd_sketch.mode (word / character mode,
 *   encoded in bit 7 of byte 1). For a QUERY call nd_sketch_text_modes()
 *   (both modes + anchors of both: probe the anchor index with both sets),
 *   and compare each candidate d with nd_sketch_for(q, d). Register with the
 *   text's own mode (return value; or nd_sketch_text()).
 * - 05:00 ND_SKETCH_MAX 512 (encoded sketch <= 2056 bytes); defaults
 *   min_resemblance 0.5, min_containment 0.6 (measured, VERDICT_DEFAULTS.md).
 * - 05:33 nd_sketch_text_modes(): a text without CJK gets an empty
 *   character-mode sketch and 0 anchors of that mode (cheaper queries).
 * - 05:25 ND_ANCHORS_QUERY 16 per mode (32 probes; 32 per mode measured the
 *   same on every row, at twice the probe cost).
 *
 * sketch.h - the verification signature of a document (the verdict's stage 2):
 * weighted-token shingles, a consistent nested sample of them (the sketch),
 * resemblance / containment estimates, copied passages, and anchors (the
 * candidates for partial copies, see anchor_index.h).
 *
 * The algorithm is specified bit for bit in proto/sketch.md, with vectors in
 * proto/sketch_vectors.jsonl. Any change that alters an output must bump
 * ND_SKETCH_VERSION.
 *
 * In short:
 * - The text is read exactly as the fingerprint reads it: the look-alike
 *   fold (lib/fold.h), then code point by code point through the normalizer
 *   with its folds (lib/normalizer.h; the same skipped markdown images,
 *   link targets and URLs). Each CJK code point is one token of weight 3,
 *   each run of word characters one token of weight 5 (word mode) — or, in
 *   character mode (CJK >= 1/25 of the letters, see ND_SKETCH_MODE_CHAR),
 *   every letter and digit a token of weight 3; punctuation, symbols and
 *   space only separate tokens. Every token keeps the code-point span
 *   [start, end) of the source text it came from.
 * - Shingle i is tokens i..j, j the first index at which the summed weight
 *   reaches 15 (5 Han characters, 3 words, mixes in between). A text whose
 *   tokens never reach 15 has one shingle of all its tokens; a text without
 *   tokens has none. Its hash is a 64-bit XXH3 of the tokens' hashes.
 * - The sketch keeps, of the distinct shingle hashes h, those whose "level"
 *   (trailing zero bits of h, at most 31) is >= shift, for the smallest shift
 *   leaving at most ND_SKETCH_MAX. Each is stored as a 32-bit value
 *   v = (bits 37..63 of h) << 5 | level, sorted ascending. A text with at
 *   most ND_SKETCH_MAX distinct shingles keeps them all (shift 0): its
 *   figures are exact.
 * - Anchors: the distinct shingle hashes with the smallest low 32 bits (ties:
 *   smaller h first), as a = h >> 32 (a bottom-m sample: a part of a text
 *   holding a fraction f of it holds about f*m of its anchors, and a copy's
 *   own bottom-m holds every anchor of the original that it shares).
 *
 * Threading: an nd_sketcher is immutable after creation and may be shared by
 * any number of threads. Each thread brings its own nd_sk_scratch, which
 * grows to the largest text seen and is then reused: nd_sketch_text() and
 * everything else here do not allocate once the scratch has grown. An
 * nd_sketch and nd_anchors are plain values (no pointers): copy them freely.
 *
 * Server integration notes (for registry/api/store):
 * - Store per document: nd_sketch_encode() bytes (8 + 4n <= 2056 bytes) and
 *   the stored anchors (ND_ANCHORS_SCALED: 16..64 of its own mode, by its
 *   length, 4 bytes each), so that start-up can rebuild the anchor index
 *   without re-reading texts, and delete can remove the document's anchors.
 *   A record of 16 (written before the anchors grew) holds a prefix of them.
 * - Query: sketch the submitted text with ND_ANCHORS_SCALED, probe the
 *   anchor index with its own mode's anchors and the first ND_ANCHORS_QUERY
 *   of the other mode's, union the hits (ranked, at most
 *   V) with the SimHash candidates, decode each candidate's stored sketch and
 *   nd_sketch_compare() it; nd_sketch_passages() with the same scratch (before
 *   it sketches anything else) gives the copied spans.
 * - Defaults (M, V, thresholds) are in /work/coord/VERDICT_DEFAULTS.md and
 *   the ND_VERDICT_* macros below. */
#ifndef ND_SKETCH_H
#define ND_SKETCH_H

#include <stddef.h>
#include <stdint.h>

#include "fingerprint.h"
#include "fold.h"

/* The algorithm's version; store it with every sketch and anchor set and
 * never compare sketches of different versions. */
#define ND_SKETCH_VERSION "nd-sketch-2"

/* Most values a sketch keeps. */
#define ND_SKETCH_MAX 512
/* Bytes of the largest encoded sketch (header 8 + 4 per value). */
#define ND_SKETCH_ENCODED_MAX (8 + 4 * ND_SKETCH_MAX)
/* Most anchors nd_sketch_text() can produce. */
#define ND_ANCHORS_MAX 64

/* Defaults chosen by measurement (proto/sketch.md; provisional until the
 * table there is final, /work/coord/VERDICT_DEFAULTS.md has the current ones).
 * ND_ANCHORS_STORE: the fewest anchors a registered document is indexed
 *   under (ND_ANCHORS_SCALED below: more for a longer text).
 * ND_ANCHORS_QUERY: anchors a query probes in the mode that is not its own
 *   (its own: as many as a document of its length is stored under).
 * ND_VERDICT_MIN_SHARED: a document holding at least this many of the
 *   query's anchors is always verified.
 * ND_VERDICT_MAX_VERIFY: of the documents holding one of them, the earliest
 *   this many are verified (V).
 * ND_VERDICT_POSTING_CAP: the most documents one anchor holds: its first
 *   ones (later documents are not indexed under it, see anchor_index.h). */
#define ND_ANCHORS_STORE 16
#define ND_ANCHORS_QUERY 16
#define ND_VERDICT_MIN_SHARED 2
#define ND_VERDICT_MAX_VERIFY 32
#define ND_VERDICT_POSTING_CAP 64
#define ND_VERDICT_MIN_RESEMBLANCE 0.5
#define ND_VERDICT_MIN_CONTAINMENT 0.6
/* A sampled containment estimate names a partial copy only when its 95 %
 * lower bound reaches this (the data's own line for a justified flag: half
 * of the text found in the document); see nd_match_classify(). */
#define ND_VERDICT_CONTAINMENT_FLOOR 0.5
/* The core rule (nd_verdict_params.min_core, .min_containment_core): a
 * copy framed by text of the re-poster's own (a site's header, a footer)
 * is named when the stretch between the first and the last found value is
 * densely found and holds at least half of the text. */
#define ND_VERDICT_MIN_CORE 0.9
#define ND_VERDICT_CORE_CONTAINMENT 0.5

/* Anchors that grow with the text (proto/sketch.md section 5): passed as
 * anchors_wanted, a text gets nd_anchors_scaled(mode, shingles) anchors in
 * each mode: one per ND_ANCHORS_RATE_* shingles of that mode (repeats
 * counted), at least ND_ANCHORS_STORE, at most ND_ANCHORS_MAX. A stored
 * document is indexed under that many of its own mode's; a query probes as
 * many of its own mode's and ND_ANCHORS_QUERY of the other mode's. Between
 * the bounds it is a fixed-rate sample: every shingle whose rank falls
 * below about 1/rate of the ranks is an anchor of every text that holds
 * it, so a short excerpt still shares about (its shingles) / rate anchors
 * with its source. Character mode has a shingle per CJK character, word
 * mode one per word. */
#define ND_ANCHORS_SCALED 0xFFFFFFFFu
#define ND_ANCHORS_RATE_CHAR 32
#define ND_ANCHORS_RATE_WORD 10

/* Tokenization modes. A text is in character mode when its CJK code points
 * are at least 1/25 of its CJK, letter and digit code points: then every
 * letter and digit is a token of weight 3 too (Chinese text with English
 * terms shingles like the ground truth's character 5-grams). Otherwise
 * words weigh 5. Sketches of different modes do not share values: compare a
 * document's sketch with the query's sketch IN THE DOCUMENT'S MODE (see
 * nd_sketch_text_modes() and nd_sketch_for()). */
#define ND_SKETCH_MODE_WORD 0
#define ND_SKETCH_MODE_CHAR 1

typedef struct nd_sketcher nd_sketcher;
typedef struct nd_sk_scratch nd_sk_scratch;

/* A document's sketch: a plain value. values[0..n) sorted strictly ascending,
 * each with level (v & 31) >= shift. */
typedef struct nd_sketch {
    uint8_t shift;     /* sampling level: values kept have level >= shift */
    uint8_t mode;      /* ND_SKETCH_MODE_WORD or ND_SKETCH_MODE_CHAR */
    uint16_t n;        /* number of values, 0..ND_SKETCH_MAX */
    uint32_t shingles; /* distinct shingles of the text (before sampling) */
    uint32_t values[ND_SKETCH_MAX];
    /* Where in the sketched text each value's shingle first occurs, when
     * positioned: pos[i] = floor(256 * i_first / occurrences), i_first the
     * index of the value's first shingle among the text's shingle
     * occurrences of this mode (so 0..255, in text order). Filled when a
     * TEXT is sketched (nd_sketch_text(), nd_sketch_text_modes(),
     * nd_sketch_query_finish()); not encoded: a decoded sketch has
     * positioned 0, and the core rule (nd_match_classify()) is then off. */
    uint8_t pos[ND_SKETCH_MAX];
    uint8_t positioned; /* 1: pos[0..n) holds the positions; 0: unknown */
} nd_sketch;

/* A document's anchors, best (smallest rank) first: a[0..n). A prefix of
 * length m is the document's bottom-m, so storing the first ND_ANCHORS_STORE
 * of a query-sized set is consistent with sketching for storage directly. */
typedef struct nd_anchors {
    uint32_t n;
    uint32_t a[ND_ANCHORS_MAX];
} nd_anchors;

/* What two sketches share. All figures are estimates from the common sample
 * (exact when both shifts are 0). Fractions are 0 when their denominator is. */
typedef struct nd_sketch_estimate {
    double resemblance;   /* |Q ∩ D| / |Q ∪ D| (Jaccard of the shingle sets) */
    double containment;   /* |Q ∩ D| / |Q|: share of the query found in the doc */
    double containment_r; /* |Q ∩ D| / |D|: share of the doc found in the query */
    uint32_t shared;      /* sampled values in common */
    uint32_t q_n, d_n;    /* sampled values of each side at the common shift */
    uint32_t q_shingles;  /* the query's distinct shingles (q_n of them sampled) */
    uint8_t shift;        /* the common shift: max of the two */
    /* The query's core (when q is positioned and shared > 0; else 0): of
     * the q_n values, those whose position lies between the first and the
     * last value found in d (core_n), and of those the found ones
     * (core_found = shared). core_found / core_n is how densely the copied
     * stretch is copied; core_n / q_n how much of the text it spans. */
    uint32_t core_found, core_n;
} nd_sketch_estimate;

/* A copied span of the last sketched text: code-point offsets [start, end)
 * of the source text (before normalization; a code point is one Unicode
 * scalar value of the UTF-8 input, skipped spans included in the count). */
typedef struct nd_passage {
    uint32_t start, end;
} nd_passage;

/* One shingle of a sketched text: its hash and the code-point span
 * [start, end) of the source text from its first token's start to its last
 * token's end (see nd_sketch_shingles()). */
typedef struct nd_shingle {
    uint64_t h;
    uint32_t start, end;
} nd_shingle;

/* Text statistics of the last sketch (optional output). */
typedef struct nd_sketch_info {
    uint32_t tokens;        /* tokens of the text */
    uint32_t shingles;      /* shingle occurrences (distinct ones: sketch.shingles) */
    uint32_t code_points;   /* code points of the source text */
    uint8_t mode;           /* the text's own mode */
    nd_integrity integrity; /* what the folds read differently (lib/fold.h) */
} nd_sketch_info;

/* The verification rules, in one place for the server and the CLI. */
typedef enum nd_match_kind {
    ND_MATCH_NONE = 0,           /* not verified: do not list */
    ND_MATCH_IDENTICAL = 1,      /* the same text */
    ND_MATCH_NEAR_DUPLICATE = 2, /* resemblance >= min_resemblance */
    ND_MATCH_PARTIAL_COPY = 3,   /* containment >= min_containment (or reverse) */
    /* A rewrite: below every threshold above, but aligned token by token
     * all along both texts (the third stage, align.h). Never returned by
     * nd_match_classify(): the caller aligns the texts. */
    ND_MATCH_REWRITE = 4,
} nd_match_kind;

typedef struct nd_verdict_params {
    double min_resemblance;   /* default ND_VERDICT_MIN_RESEMBLANCE */
    double min_containment;   /* share of the submitted text in the doc */
    double min_containment_r; /* share of the doc in the submitted text; > 1 = off */
    /* The core rule (proto/sketch.md section 6): a query whose core (see
     * nd_sketch_estimate) holds found values at a share >= min_core is a
     * partial copy from containment >= min_containment_core on (below
     * min_containment). min_core 0 (or > 1) = off. Defaults
     * ND_VERDICT_MIN_CORE, ND_VERDICT_CORE_CONTAINMENT. */
    double min_core;
    double min_containment_core;
} nd_verdict_params;

/* Fills the defaults above. */
void nd_verdict_params_default(nd_verdict_params *p);

/* The kind of a candidate: same_text (the caller compared text hashes) gives
 * IDENTICAL; otherwise by the estimate and the thresholds. */
nd_match_kind nd_match_classify(const nd_sketch_estimate *e, int same_text,
                                const nd_verdict_params *p);

/* "identical", "near_duplicate", "partial_copy", "rewrite" or "none". */
const char *nd_match_kind_name(nd_match_kind k);

/* Builds the sketcher (normalization tables with the folds, 30-50 ms).
 * Returns 0 and a new object (free with nd_sketcher_destroy()), -ENOMEM, or
 * -ENOENT when OpenCC's t2s data or ICU's confusables cannot be loaded. */
int nd_sketcher_create(nd_sketcher **out);

/* Frees a sketcher; NULL is allowed. */
void nd_sketcher_destroy(nd_sketcher *sk);

/* Creates per-thread scratch (free with nd_sk_scratch_destroy()). Returns 0
 * or -ENOMEM. */
int nd_sk_scratch_create(nd_sk_scratch **out);

/* Frees scratch; NULL is allowed. */
void nd_sk_scratch_destroy(nd_sk_scratch *s);

/* The anchors a text of `shingles` shingles in mode `mode` gets with
 * ND_ANCHORS_SCALED: clamp(ceil(shingles / rate), ND_ANCHORS_STORE,
 * ND_ANCHORS_MAX) (rate ND_ANCHORS_RATE_CHAR or ND_ANCHORS_RATE_WORD). */
unsigned nd_anchors_scaled(unsigned mode, size_t shingles);

/* Sketches the UTF-8 text [text, text+len) (need not be NUL-terminated).
 * Fills *out (required) and, when anchors_out is not NULL, its first
 * min(anchors_wanted, ND_ANCHORS_MAX, distinct shingles) anchors
 * (anchors_wanted ND_ANCHORS_SCALED: nd_anchors_scaled() of the mode and
 * its shingles instead of anchors_wanted); when info
 * is not NULL, its statistics. The scratch then holds the text's shingles and
 * their spans for nd_sketch_passages() until the next call with it.
 * Returns 0; -EILSEQ if the text is not valid UTF-8 (outputs untouched, the
 * scratch holds no text); -ENOMEM if the scratch could not grow. Allocates
 * only when the scratch must grow. An empty text gives n = 0, shingles 0. */
int nd_sketch_text(const nd_sketcher *sk, nd_sk_scratch *scratch, const char *text, size_t len,
                   nd_sketch *out, nd_anchors *anchors_out, unsigned anchors_wanted,
                   nd_sketch_info *info);

/* For a query: sketches the text in BOTH modes, out[ND_SKETCH_MODE_WORD] and
 * out[ND_SKETCH_MODE_CHAR], with anchors of each (anchors_out may be NULL;
 * a query probes the anchor index with both sets). Returns the text's own
 * mode (0 or 1: out[mode] is what nd_sketch_text() gives, the one to store
 * when registering) or -EILSEQ / -ENOMEM. The scratch then holds the
 * shingles of both modes, so nd_sketch_passages() works against a document of
 * either mode. A text without any CJK code point gets an EMPTY character-mode
 * sketch (n = 0, shingles 0) and no character-mode anchors: it is compared
 * with word-mode documents only (proto/sketch.md: no effect measured, and
 * English text is 3x cheaper). */
int nd_sketch_text_modes(const nd_sketcher *sk, nd_sk_scratch *scratch, const char *text,
                         size_t len, nd_sketch out[2], nd_anchors anchors_out[2],
                         unsigned anchors_wanted, nd_sketch_info *info);

/* With anchors_wanted ND_ANCHORS_SCALED, nd_sketch_text_modes() and
 * nd_sketch_query() give the text's own mode nd_anchors_scaled() anchors and
 * the other mode ND_ANCHORS_QUERY: what a query probes. */

/* nd_sketch_text_modes() in two steps, for a query whose sketches are needed
 * only when stage 1 finds candidates to verify (most queries find none):
 * nd_sketch_query() tokenizes and shingles the text in both modes (held in
 * the scratch) and fills the anchors and info exactly as
 * nd_sketch_text_modes() does; it returns the text's own mode, -EILSEQ or
 * -ENOMEM. nd_sketch_query_finish() then fills out[2] exactly as
 * nd_sketch_text_modes() would have (and readies the scratch for
 * nd_sketch_passages(), which gives 0 passages before it); it may be called
 * again (same result) until the scratch sketches another text. Returns 0,
 * -ENOMEM, or -EINVAL when the scratch's last text did not come from
 * nd_sketch_query(). Neither allocates once the scratch has grown. */
int nd_sketch_query(const nd_sketcher *sk, nd_sk_scratch *scratch, const char *text, size_t len,
                    nd_anchors anchors_out[2], unsigned anchors_wanted, nd_sketch_info *info);
int nd_sketch_query_finish(nd_sk_scratch *scratch, nd_sketch out[2]);

/* The fingerprint's tokens of the text last sketched with the scratch (by
 * any of the three calls above): the word-mode tokens, which are exactly
 * fingerprint.md's (the same normalization, skipped spans and Hangul
 * composition), and its characters, for nd_fingerprint_tokens(), so that a
 * text is tokenized once for both. *out borrows from the scratch: valid
 * until it sketches another text. Returns 0, or -EINVAL when the scratch
 * holds no text (its last call failed, or none was made). No allocation. */
int nd_sketch_fp_tokens(const nd_sk_scratch *scratch, nd_fp_tokens *out);

/* Tokenizes and shingles the text in its own mode only, without a sketch
 * or anchors (for nd_sketch_shingles(): a source text read for its
 * passages on both sides). Fills info when not NULL. Returns 0, -EILSEQ
 * or -ENOMEM, as nd_sketch_text(). Allocates only when the scratch must
 * grow. nd_sketch_passages() then gives 0 passages. */
int nd_sketch_shingle_text(const nd_sketcher *sk, nd_sk_scratch *scratch, const char *text,
                           size_t len, nd_sketch_info *info);

/* The own mode (ND_SKETCH_MODE_*) of the text last sketched with the
 * scratch, or -EINVAL when it holds none. */
int nd_sketch_own_mode(const nd_sk_scratch *scratch);

/* The shingles of mode `mode` of the text last sketched with the scratch,
 * in text order (repeats included): *out borrows from the scratch, valid
 * until it sketches another text; *n of them. After nd_sketch_text() only
 * the text's own mode is held (the other has 0); after nd_sketch_query()
 * or nd_sketch_text_modes() both (the character mode of a text without CJK
 * has 0). Returns 0, or -EINVAL when the scratch holds no text or mode is
 * not 0 or 1. No allocation. */
int nd_sketch_shingles(const nd_sk_scratch *scratch, unsigned mode, const nd_shingle **out,
                       size_t *n);

/* The tokens of mode `mode` of the text last sketched with the scratch, in
 * text order (for the third stage's alignment, align.h): *h their hashes,
 * *start and *end their code-point spans of the source text, *n of them;
 * all borrowed from the scratch until it sketches another text. Which
 * modes are held: as nd_sketch_shingles(). Returns 0, or -EINVAL (no
 * text, or mode not 0 or 1). No allocation. */
int nd_sketch_tokens(const nd_sk_scratch *scratch, unsigned mode, const uint64_t **h,
                     const uint32_t **start, const uint32_t **end, size_t *n);

/* The query sketch (of a pair from nd_sketch_text_modes()) to compare with d. */
static inline const nd_sketch *nd_sketch_for(const nd_sketch q[2], const nd_sketch *d)
{
    return &q[d->mode & 1];
}

/* Compares query q with document d at the common shift. Pure, no allocation,
 * O(q->n + d->n). Containment is asymmetric: an excerpt q of d has
 * containment ~1 and containment_r ~|q|/|d|. */
void nd_sketch_compare(const nd_sketch *q, const nd_sketch *d, nd_sketch_estimate *out);

/* The spans of the text last sketched with q_scratch (the query) that are
 * found in d: its shingles of d's mode (after nd_sketch_text(), only the
 * text's own mode is held: 0 passages for a d of the other mode) sampled at the common shift max(q.shift, d->shift)
 * (q.shift as that call computed it) are walked in text order; a run of
 * consecutive sampled shingles all found in d (allowing one sampled shingle in
 * between that is not, when the run goes on after it) becomes one passage,
 * from the first code point of its first shingle to the end of its last;
 * overlapping or touching passages are merged. Writes at most cap passages
 * (sorted, disjoint) into out and returns how many there are in total (may
 * exceed cap). Returns 0 when the scratch holds no text. No allocation. */
size_t nd_sketch_passages(const nd_sk_scratch *q_scratch, const nd_sketch *d, nd_passage *out,
                          size_t cap);

/* Bytes nd_sketch_encode() writes for s: 8 + 4 * s->n. */
size_t nd_sketch_encoded_size(const nd_sketch *s);

/* Encodes s into buf (little-endian): byte 0 format (1), byte 1 shift | mode << 7,
 * bytes 2..3 n, bytes 4..7 shingles, then n values of 4 bytes. Returns the
 * bytes written, or 0 if cap is too small or s is not valid. */
size_t nd_sketch_encode(const nd_sketch *s, uint8_t *buf, size_t cap);

/* Decodes exactly len bytes into *out, checking everything: format byte,
 * shift <= 31, n <= ND_SKETCH_MAX, n <= shingles, len == 8 + 4n, values
 * strictly ascending with level >= shift. Returns 0, or -EINVAL (corrupt;
 * *out is then unspecified). */
int nd_sketch_decode(const uint8_t *buf, size_t len, nd_sketch *out);

/* Of q's values sampled at e's shift (e: nd_sketch_compare() of q with
 * d), the longest run in the query's text order that holds no value
 * found in d: a copy of the whole text leaves short runs only, a document
 * sharing one part of it a long one (the third stage's gray zone). e->q_n
 * when nothing is shared or q is not positioned. O(q->n + d->n + 256),
 * pure, no allocation. */
uint32_t nd_sketch_max_gap(const nd_sketch *q, const nd_sketch *d, const nd_sketch_estimate *e);

/* Bounds for verifying many candidates. Both are exact: they
 * never drop a pair that nd_match_classify(&e, 0, p) would list for the
 * nd_sketch_compare() estimate e (same_text pairs are the caller's: they are
 * listed whatever the figures).
 *
 * nd_sketch_reachable(): from the size of a document's sketch alone (its
 * shift and n, a few bytes a caller can keep in memory), whether q (in d's
 * mode) compared with it could be listed. Returns 0 only when it cannot
 * (then the sketch need not even be read), else 1. O(q->n), no allocation.
 *
 * nd_sketch_compare_bounded(): nd_sketch_compare() that stops as soon as no
 * threshold of p can be reached any more (what is shared so far plus what
 * is left to merge). Returns 1 with *out exactly as nd_sketch_compare()
 * fills it, or 0 when cut short: then the pair cannot be listed and *out has
 * shared 0 and figures 0 (q_n, d_n, shift as at the common shift). Pure, no
 * allocation, O(q->n + d->n) at worst. */
int nd_sketch_reachable(const nd_sketch *q, unsigned d_shift, uint32_t d_n,
                        const nd_verdict_params *p);
int nd_sketch_compare_bounded(const nd_sketch *q, const nd_sketch *d, const nd_verdict_params *p,
                              nd_sketch_estimate *out);

#endif
