/* attrib.c -- honest attribution in adaptive mode: estimates, from the sampling windows, the time and
 * calls of de-instrumented callees that the recording shows only as their callers' self time.
 *
 * Renderer side (no GIL, constant cost per event).  The recording's SAMPLING block lists the windows
 * (sampling.c), global [begin, end) tick intervals during which de-instrumented enters were recorded,
 * each after a K_MARK record: such a frame is *hidden* (outside windows it would not be there).  For
 * every gap between two records the renderer charges to the top frame, the part inside windows is
 * found with a per-thread cursor over the sorted windows, and:
 *   - top frame visible (code C): outside-window ticks go to A[C] (oc_attr_outside; the usual gap, which
 *     ends before the thread's next window begins, goes there inline: oc_attr_gap_fast), inside-window
 *     ticks to B[C];
 *   - top frame hidden: its inside-window ticks go to the pair (C, X) where C is the nearest visible
 *     frame below (the one whose self time holds it outside windows) and X the top frame's code (self
 *     time); its ticks after a window closed are measured time of a recorded call, in neither.  Each
 *     hidden frame's inside-window inclusive ticks (a difference of the thread's running window total
 *     at its begin and end) go to the pair (C, X) of its own code when it ends, unless an activation of
 *     X is below it on the stack (recursion: that one's inclusive time holds them already).
 * Windows are a sample of time that does not depend on what the program does, so inside them C's
 * "recorded self" state splits into its own time B[C] and hidden callees' time H[C] = sum of pairs
 * (C, X), and the same split holds outside: of A[C], A*H/(B+H) is the callees' (each by its share, its
 * calls scaled alike: calls * A/(B+H)), the rest C's own.  Before a callee is de-instrumented its calls
 * are recorded also inside windows (visible frames), so they count in neither B nor H: the estimate
 * stays unbiased over the whole run.
 * A window opens at a moment the program chooses (a pending call, or a GIL release), possibly inside an
 * unrecorded call: the end of that call is recorded -- a Python function's return if it comes while the
 * window is open (the callbacks keep unbegun returns inside windows), a C function's return whenever it
 * comes (its call site was re-armed; C_RETURN cannot be disabled) -- and the window part of the gap
 * before it is moved from B[C] to the pair (C, callee) as a tail (oc_attr_unmatched_leave): the call
 * was running all through it (one begun inside the window would have been recorded).  On 3.12 that is
 * most windows of a program that sleeps: the timer thread opens them while the program is in the C
 * call that released the GIL, and the program may get it back only after the window closed.  The tail
 * makes an edge C -> callee only if C made the call (its depth says so), not when the callee was called
 * by unrecorded frames above C; so does a hidden frame begun inside a window that opened in its caller
 * (that caller's begin not recorded: the depth gap under it says so).
 * A leave of a de-instrumented function (or, in near-zero mode, a C return) whose caller is deeper than
 * the top recorded frame C (the window opened inside a chain of unrecorded calls: a recursion,
 * de-instrumented helpers) shows unrecorded frames running after it, until the next enter or a jump of
 * C's own: the window part of those gaps is a tail too (oc_attr_thread.unk_code1), not C's own time --
 * a recursion's frames between their recorded calls had counted as the caller's own.  Tails are spread
 * over the anchor's hidden callees' self time in proportion; an anchor whose windows saw only tails
 * gives each callee its own.
 * A gap of a visible top frame that began before a window opened holds, from the window's begin to the
 * thread's first record in it, no code of that frame's own (every event is armed there): the thread was
 * in a call begun before the window, or waited for the GIL in one -- a C call's, when no leave says
 * otherwise (on 3.12 a de-instrumented C call site records no return).  These *silent* ticks go to the
 * anchor's hidden C callees in proportion to their window self time (a thread in another thread's
 * window, blocked in a GIL-releasing call that began before it, had charged the whole window to its
 * caller's own time: a worker's 15 ms in sched_yield as `work`'s), or stay the anchor's own when the
 * windows saw it call none.
 * Calls are estimated from the calls begun inside the measured parts of windows (see est_calls).  Not
 * covered: windows that a killed process did not write (its recording has no SAMPLING block, so nothing
 * is estimated).
 */
#include "render.h"
#include "recording.h"
#include <stdlib.h>
#include <string.h>

int oc_attr_on;
uint32_t oc_attr_wgen;
uint64_t *oc_attr_outside;
uint32_t oc_attr_noutside;
/* Outside ticks count from the first de-instrumentation (the recording's SAMPLING blocks say when; an
 * older recording: from the first window's begin): before it nothing was hidden, and counted, a
 * caller's own time from then was charged with its callees' later share (a sleeping callee's 0.69 came
 * out 0.79); after it, a caller's recorded self time holds its de-instrumented callees' even before the
 * first window opens, which on 3.12 with busy threads took up to ~90 ms (the first window stands for
 * that time too) */
uint64_t oc_attr_from = UINT64_MAX;

typedef struct {
    uint32_t code;
    uint64_t self, incl;    /* window ticks as the top frame / on the stack */
    uint64_t tail;          /* window ticks of calls begun before their window (below whose top: unknown) */
    int direct;             /* called by the anchor itself (not by another hidden frame) */
    int c;                  /* a C function */
    uint64_t calls, full;   /* calls that ended, begun after their window opened, and their inclusive ticks */
    uint64_t begun;         /* calls begun inside the measured part of a window */
} pair;

typedef struct {
    uint64_t b;             /* visible self ticks inside windows (outside: oc_attr_outside) */
    uint64_t silent;        /* the part of them after a window opened until the thread's first record in it */
    pair *pairs;            /* hidden callees seen inside windows under this code */
    uint32_t npairs, cap;
} anchor_stat;

typedef struct {
    double calls, self, incl; /* estimated, outside windows, as a hidden callee */
    double removed;           /* estimated callees' ticks taken out of this code's self time */
} estimate;

static struct {
    uint64_t (*win)[3];     /* begin, end, weight: 16 x the ticks of the run each window tick stands for */
    uint32_t nwin, skipped, status;
    uint64_t win_ticks;
    uint64_t kick;          /* the first de-instrumentation's ticks (0: not known, an older recording) */
    char other[33];
    anchor_stat *st;
    uint32_t nst;
    estimate *est;
    uint32_t nest;
    int failed;
    /* run delays (sampling.c): the waiting-for-a-CPU share inside windows and outside, CPU-weighted */
    double rd_in_num, rd_in_den, rd_out_num, rd_out_den;
    uint32_t rd_in_n, rd_out_n;
} attr_st;

void oc_attr_reset(void) {
    for (uint32_t i = 0; i < attr_st.nst; i++)
        free(attr_st.st[i].pairs);
    free(attr_st.st);
    free(attr_st.win);
    free(attr_st.est);
    memset(&attr_st, 0, sizeof attr_st);
    oc_attr_on = 0;
    free(oc_attr_outside);
    oc_attr_outside = NULL;
    oc_attr_noutside = 0;
    oc_attr_from = UINT64_MAX;
    oc_attr_wgen++;
}

/* fork child: forget the parent's tables without freeing them (its render thread may have been
 * updating them) */
void oc_attr_abandon(void) {
    memset(&attr_st, 0, sizeof attr_st);
    oc_attr_on = 0;
    oc_attr_outside = NULL;
    oc_attr_noutside = 0;
    oc_attr_from = UINT64_MAX;
    oc_attr_wgen++;
}

static inline uint64_t rd64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

/* SAMPLING blocks come as windows open (and one at stop with the final status): append their windows */
void oc_attr_block(const uint8_t *p, uint32_t len, uint32_t wl) {
    if (len < 48)
        return;
    uint32_t n;
    memcpy(&attr_st.status, p, 4);
    memcpy(&n, p + 4, 4);
    memcpy(&attr_st.skipped, p + 8, 4);
    memcpy(attr_st.other, p + 16, 32);
    attr_st.other[32] = 0;
    if ((uint64_t)n * wl > len - 48)
        n = (len - 48) / wl;
    uint32_t magic, tail = 48 + wl * n;
    if (len >= tail + OC_SAMPLING_RD_LEN && (memcpy(&magic, p + tail, 4), magic == OC_SAMPLING_RD_MAGIC)) {
        double v[4];
        memcpy(&attr_st.rd_in_n, p + tail + 4, 4);
        memcpy(&attr_st.rd_out_n, p + tail + 8, 4);
        memcpy(v, p + tail + 16, 32);
        attr_st.rd_in_num = v[0], attr_st.rd_in_den = v[1], attr_st.rd_out_num = v[2], attr_st.rd_out_den = v[3];
        tail += OC_SAMPLING_RD_LEN;
    }
    if (len >= tail + OC_SAMPLING_KICK_LEN && (memcpy(&magic, p + tail, 4), magic == OC_SAMPLING_KICK_MAGIC) &&
        !attr_st.kick)
        attr_st.kick = rd64(p + tail + 8);
    if (!n)
        return;
    uint64_t(*w)[3] = realloc(attr_st.win, ((size_t)attr_st.nwin + n) * sizeof *attr_st.win);
    if (!w) {
        attr_st.failed = 1;
        return;
    }
    attr_st.win = w;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *q = p + 48 + (size_t)wl * i;
        uint64_t b = rd64(q), e = rd64(q + 8), stands = wl > 16 ? rd64(q + 16) : 0;
        if (attr_st.nwin && b < attr_st.win[attr_st.nwin - 1][1])
            continue; /* out of order or overlapping (a ring dump after incremental blocks): keep the first */
        if (!attr_st.nwin) { /* (from the first de-instrumentation, when known: see oc_attr_from) */
            oc_attr_from = attr_st.kick && attr_st.kick < b ? attr_st.kick : b;
            if (stands)
                stands += b - oc_attr_from;
        }
        attr_st.win[attr_st.nwin][0] = b;
        attr_st.win[attr_st.nwin][1] = e;
        /* a window tick stands for stands / (e - b) ticks of the run; 16 for every window when not known
         * (the ratios are what matter), at least 1, at most 16 x 1e6 */
        double wt = stands && e > b ? 16.0 * (double)stands / (double)(e - b) : 16.0;
        attr_st.win[attr_st.nwin][2] = wt < 1 ? 1 : wt > 1.6e7 ? 16000000 : (uint64_t)(wt + 0.5);
        attr_st.nwin++;
        attr_st.win_ticks += e > b ? e - b : 0;
    }
    oc_attr_wgen++; /* (threads' cached next window begins are stale) */
    oc_attr_on = attr_st.nwin > 0;
}

/* oc_attr_outside holds code `id` (grown by 256 entries past it); 0: no memory (reported as incomplete) */
static int outside_grow(uint32_t id) {
    if (id < oc_attr_noutside)
        return 1;
    uint32_t n = id + 256;
    uint64_t *o = realloc(oc_attr_outside, (size_t)n * sizeof *o);
    if (!o) {
        attr_st.failed = 1;
        return 0;
    }
    memset(o + oc_attr_noutside, 0, (size_t)(n - oc_attr_noutside) * sizeof *o);
    oc_attr_outside = o;
    oc_attr_noutside = n;
    return 1;
}

static anchor_stat *stat_of(uint32_t id) {
    if (UNLIKELY(id >= attr_st.nst)) {
        if (id == OC_NO_CODE)
            return NULL;
        uint32_t n = id + 256;
        anchor_stat *s = realloc(attr_st.st, (size_t)n * sizeof *s);
        if (!s) {
            attr_st.failed = 1;
            return NULL;
        }
        memset(s + attr_st.nst, 0, (size_t)(n - attr_st.nst) * sizeof *s);
        attr_st.st = s;
        attr_st.nst = n;
    }
    return &attr_st.st[id];
}

static pair *pair_of(uint32_t anchor, uint32_t code) {
    anchor_stat *s = stat_of(anchor);
    if (!s)
        return NULL;
    for (uint32_t i = 0; i < s->npairs; i++)
        if (s->pairs[i].code == code)
            return &s->pairs[i];
    if (s->npairs == s->cap) {
        uint32_t cap = s->cap ? s->cap * 2 : 4;
        pair *np = realloc(s->pairs, cap * sizeof *np);
        if (!np) {
            attr_st.failed = 1;
            return NULL;
        }
        s->pairs = np;
        s->cap = cap;
    }
    pair *q = &s->pairs[s->npairs++];
    memset(q, 0, sizeof *q);
    q->code = code;
    return q;
}

/* ticks of [t0, t1) inside windows, and (*weighted) each times its window's weight, of which
 * (*silent, weighted) in windows that opened after t0; the cursor only moves forward (a thread's time
 * does) */
static uint64_t inside(oc_attr_thread *a, uint64_t t0, uint64_t t1, uint64_t *weighted, uint64_t *silent) {
    while (a->wcur < attr_st.nwin && attr_st.win[a->wcur][1] <= t0)
        a->wcur++;
    uint64_t in = 0, w = 0, s = 0;
    for (uint32_t k = a->wcur; k < attr_st.nwin && attr_st.win[k][0] < t1; k++) {
        uint64_t b = attr_st.win[k][0] > t0 ? attr_st.win[k][0] : t0, e = attr_st.win[k][1] < t1 ? attr_st.win[k][1] : t1;
        if (e > b) {
            in += e - b;
            w += (e - b) * attr_st.win[k][2];
            if (attr_st.win[k][0] > t0)
                s += (e - b) * attr_st.win[k][2];
        }
    }
    *weighted = w;
    *silent = s;
    return in;
}

void oc_attr_gap(oc_attr_thread *a, uint64_t t0, uint64_t t1, uint64_t net, uint32_t top, int hidden,
                 uint32_t anchor, uint32_t head) {
    uint64_t span = t1 > t0 ? t1 - t0 : 0, inw = 0, silw = 0;
    uint64_t in = span ? inside(a, t0, t1, &inw, &silw) : 0;
    /* net ticks inside windows (what outside windows holds is net - in_net), and weighted */
    uint64_t in_net = in >= span ? net : (uint64_t)((double)net * (double)in / (double)span);
    uint64_t in_netw = in ? (uint64_t)((double)in_net * (double)inw / (double)in) : 0;
    a->next_begin = a->wcur < attr_st.nwin ? attr_st.win[a->wcur][0] : UINT64_MAX; /* (oc_attr_gap_fast's test) */
    a->wgen = oc_attr_wgen;
    a->last_in = a->last_silent = 0;
    a->win_total += in_netw;
    if (!hidden) {
        anchor_stat *s = stat_of(top);
        if (s && outside_grow(top)) {
            uint64_t out = net - in_net;
            if (oc_attr_from > t0) { /* (the part before oc_attr_from: no window stands for it) */
                uint64_t after = oc_attr_from < t1 ? t1 - oc_attr_from : 0;
                out = after > in ? (uint64_t)((double)net * (double)(after - in) / (double)span) : 0;
            }
            oc_attr_outside[top] += out;
            if (a->unk_code1 && in_netw) {
                /* unrecorded frames ran above the top frame (a leave showed their depth): the window part
                 * is theirs, de-instrumented calls of top's, a tail (whose own code is not known; the
                 * recursion's between its recorded calls) -- not top's own time */
                pair *q = pair_of(top, a->unk_code1 - 1);
                if (q) {
                    q->tail += in_netw;
                    q->incl += in_netw;
                }
                return;
            }
            /* the part after a window opened during the gap: the thread recorded nothing in that window
             * until t1, though every event was armed there, so it ran no Python code of its own: it was in
             * a call begun before the window (or waited for the GIL) -- an unrecorded C call's unless the
             * leave of a de-instrumented Python function ends the gap (oc_attr_unmatched_leave) */
            uint64_t sil = silw >= inw ? in_netw : (uint64_t)((double)in_netw * (double)silw / (double)inw);
            s->b += in_netw - sil;
            s->silent += sil;
            a->last_code = top;
            a->last_in = in_netw;
            a->last_silent = sil;
        }
        return;
    }
    (void)head;
    if (!in_netw || anchor == OC_NO_CODE)
        return;
    pair *q = pair_of(anchor, top);
    if (q)
        q->self += in_netw;
}

void oc_attr_call(oc_attr_thread *a, uint32_t anchor, uint32_t code, uint64_t ts, int c) {
    uint64_t w, sw;
    if (anchor == OC_NO_CODE || !inside(a, ts, ts + 1, &w, &sw))
        return;
    pair *q = pair_of(anchor, code);
    if (q) {
        q->begun += w;
        q->c |= c;
    }
}

void oc_attr_pop(oc_attr_thread *a, uint32_t anchor, uint32_t code, int direct, int nested, uint64_t win_mark,
                 uint64_t incl, int c) {
    if (anchor == OC_NO_CODE)
        return;
    pair *q = pair_of(anchor, code);
    if (q) {
        q->direct |= direct;
        q->c |= c;
        q->calls++;
        if (!nested) { /* (a recursion's inclusive time counts once, the outermost activation's) */
            q->full += incl;
            q->incl += a->win_total - win_mark;
        }
    }
}

void oc_attr_unmatched_leave(oc_attr_thread *a, uint32_t code, int c, int direct) {
    if (!a->last_in || code >= rmeta.ncodes || (!c && !(rmeta.codes[code].flags & CF_START_DISABLED)))
        return;
    anchor_stat *s = stat_of(a->last_code);
    pair *q = s ? pair_of(a->last_code, code) : NULL;
    s = stat_of(a->last_code); /* pair_of may have moved the array */
    if (!s || !q)
        return;
    uint64_t ls = a->last_silent < a->last_in ? a->last_silent : a->last_in;
    uint64_t d = a->last_in - ls < s->b ? a->last_in - ls : s->b, ds = ls < s->silent ? ls : s->silent;
    s->b -= d;
    s->silent -= ds;
    q->direct |= direct;
    q->c |= c;
    q->tail += d + ds;
    q->incl += d + ds; /* a tail: no call counted (it began before the window), its time is */
    a->last_in = a->last_silent = 0;
}

/* an anchor's visible self ticks outside windows */
static uint64_t outside_of(const anchor_stat *s) {
    uint32_t id = (uint32_t)(s - attr_st.st);
    return id < oc_attr_noutside ? oc_attr_outside[id] : 0;
}

/* How an anchor's window ticks are read: *scale: outside-window ticks per window tick of its
 * recorded-self state; fself: tails are spread over the hidden frames' self times in proportion (a
 * tail's own top frame is unknown); 0 when no hidden frame has any (windows that opened inside
 * unrecorded calls and saw only their ends): each pair keeps its own tail, the time of the code whose
 * leave it preceded or followed, so that no row loses it; csil: the anchor's silent ticks (a window's
 * time before the thread's first record in it: inside an unrecorded call) per self tick of its hidden C
 * callees, to which they go in proportion; when windows saw none, the silent ticks stay the anchor's own
 * (0); own: the anchor's own window ticks (b, and the silent ticks no C callee took) */
typedef struct {
    double scale, fself, csil;
    uint64_t own;
} spread;

/* a pair's inclusive window ticks, tails and silent ticks spread as `spread` says */
static double est_incl(const pair *q, const spread *sp) {
    return (sp->fself ? (double)(q->incl - q->tail) * sp->fself : (double)q->incl) +
           (q->c ? (double)q->self * sp->csil : 0.0);
}

/* a pair's self window ticks, spread likewise */
static double est_self(const pair *q, const spread *sp) {
    return (sp->fself ? (double)q->self * sp->fself : (double)q->tail) + (q->c ? (double)q->self * sp->csil : 0.0);
}

/* calls in a pair's window time: the calls begun inside the measured part of windows.  That part
 * starts at a random offset after the window opened (sampling.c), not where the program let the window
 * open (at a function's start, a back jump, a GIL release, often just before a call), so counting
 * begins is not biased; and unlike window time over the mean duration of the sampled calls, one call
 * stalled by the OS scheduler for milliseconds does not skew it. */
static double est_calls(const pair *q) { return (double)q->begun; }

/* an anchor's hidden window ticks (tails, and silent ticks given to C callees, included); *sp: how
 * they are spread */
static uint64_t hidden_ticks(const anchor_stat *s, spread *sp) {
    uint64_t h = 0, tails = 0, cself = 0;
    for (uint32_t i = 0; i < s->npairs; i++) {
        h += s->pairs[i].self;
        tails += s->pairs[i].tail;
        if (s->pairs[i].c)
            cself += s->pairs[i].self;
    }
    uint64_t sil = cself ? s->silent : 0;
    sp->own = s->b + (s->silent - sil);
    sp->scale = h + tails ? (double)outside_of(s) / (double)(sp->own + h + tails + sil) : 0.0;
    sp->fself = h ? (double)(h + tails) / (double)h : 0.0;
    sp->csil = cself ? (double)sil / (double)cself : 0.0;
    return h + tails + sil;
}

/* the waiting-for-a-CPU shares inside and outside windows (-1: not measured: a damaged or older
 * recording, fewer than 5 windows measured, no CPU time) */
static void run_delay_shares(double *in, double *out) {
    int ok = attr_st.rd_in_n >= 5 && attr_st.rd_out_n >= 5 && attr_st.rd_in_den > 0 && attr_st.rd_out_den > 0;
    *in = ok ? attr_st.rd_in_num / attr_st.rd_in_den : -1.0;
    *out = ok ? attr_st.rd_out_num / attr_st.rd_out_den : -1.0;
    if (ok && (!(*in >= 0 && *in < 1) || !(*out >= 0 && *out < 1)))
        *in = *out = -1.0; /* (read from the recording: any bytes) */
}

/* what estimated calls are multiplied by: calls are counted in windows, where the program waited less
 * for a CPU than outside (a window opens while its thread runs), and scaled by wall time */
static double calls_factor(void) {
    double in, out;
    run_delay_shares(&in, &out);
    if (in < 0)
        return 1.0;
    double f = (1.0 - out) / (1.0 - in);
    return f < 0.05 ? 0.05 : f > 20 ? 20 : f;
}

/* once, after the render: every code's estimate */
static int compute(void) {
    if (attr_st.est)
        return 0;
    attr_st.nest = attr_st.nst;
    attr_st.est = calloc((size_t)attr_st.nest + 1, sizeof *attr_st.est);
    if (!attr_st.est)
        return -1;
    double cf = calls_factor();
    for (uint32_t c = 0; c < attr_st.nst; c++) {
        anchor_stat *s = &attr_st.st[c];
        if (!s->npairs)
            continue;
        spread sp;
        uint64_t h = hidden_ticks(s, &sp);
        if (!h)
            continue;
        double scale = sp.scale;
        attr_st.est[c].removed += scale * (double)h;
        for (uint32_t i = 0; i < s->npairs; i++) {
            pair *q = &s->pairs[i];
            if (q->code >= attr_st.nest)
                continue;
            attr_st.est[q->code].calls += cf * scale * est_calls(q);
            attr_st.est[q->code].self += scale * est_self(q, &sp);
            attr_st.est[q->code].incl += scale * est_incl(q, &sp);
        }
    }
    return 0;
}

/* function id's estimate (results.c exports it): 1 and *e, or 0: none */
int oc_attr_estimate(uint32_t id, oc_attr_est *e) {
    if (!oc_attr_on || compute() < 0 || id >= attr_st.nest ||
        (attr_st.est[id].calls == 0 && attr_st.est[id].removed == 0 && attr_st.est[id].incl == 0))
        return 0;
    anchor_stat *s = &attr_st.st[id];
    spread sp;
    hidden_ticks(s, &sp);
    *e = (oc_attr_est){.calls = attr_st.est[id].calls, .self = attr_st.est[id].self, .incl = attr_st.est[id].incl,
                       .removed = attr_st.est[id].removed, .window_self = sp.own, .outside_self = outside_of(s),
                       .npairs = s->npairs};
    return 1;
}

/* the estimated share of each hidden function that function id (with an estimate) calls directly, up to
 * `max` of them (its npairs are enough): how many */
uint32_t oc_attr_callees(uint32_t id, oc_attr_callee_est *out, uint32_t max) {
    if (id >= attr_st.nest)
        return 0;
    anchor_stat *s = &attr_st.st[id];
    spread sp;
    uint64_t h = hidden_ticks(s, &sp);
    double scale = sp.scale;
    uint32_t k = 0;
    for (uint32_t i = 0; h && i < s->npairs && k < max; i++) {
        pair *q = &s->pairs[i];
        if (q->direct)
            out[k++] = (oc_attr_callee_est){.code = q->code, .incl = scale * est_incl(q, &sp),
                                            .self = scale * est_self(q, &sp),
                                            .calls = scale * est_calls(q), .window_calls = q->begun,
                                            .window_incl = q->incl};
    }
    return k;
}

/* the sampling figures of the session (results.c exports them) */
void oc_attr_summary_get(oc_attr_sum *m) {
    double in, out;
    run_delay_shares(&in, &out);
    *m = (oc_attr_sum){.on = attr_st.status == OC_SAMPLING_ON, .windows = attr_st.nwin, .window_ticks = attr_st.win_ticks,
                       .skipped = attr_st.skipped, .other = attr_st.other, .failed = attr_st.failed, .rd_inside = in,
                       .rd_outside = out, .calls_factor = calls_factor(), .rd_inside_n = attr_st.rd_in_n,
                       .rd_outside_n = attr_st.rd_out_n};
}
