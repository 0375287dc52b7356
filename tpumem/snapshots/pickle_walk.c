/* Reading a PyTorch memory snapshot (the pickle `torch.cuda.memory._dump_snapshot`
 * writes) as a stream, in C.
 *
 * Python's unpickler keeps every dict and list it made in its memo until the end,
 * so a snapshot read whole holds every trace entry as a dict: several times the
 * file's size, and memory_viz's own limit. This walker reads the pickle's opcodes
 * itself and never builds the entries: each trace entry (a dict with an "action"
 * appended to one of `device_traces`' lists) becomes one row of plain columns, its
 * dict is dropped, and its memo slot says so. Everything else (segments, frames,
 * settings: the allocator's state, not its history) is kept as small values that
 * Python reads afterwards through the accessors at the end of this file.
 *
 * Only data is read: dicts, lists, tuples, strings, bytes, numbers, None and
 * booleans. An opcode that would build an object (a global, a reduce) is refused,
 * so no snapshot can run code, which `pickle.load` of the same file would.
 *
 * Plain C with no Python API, called through ctypes (which lets go of the GIL).
 * The caller hands bytes as it reads them; an opcode cut at the end of a piece is
 * read again with the next.
 */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h>

enum {
    T_EMPTY = 0, /* a memo slot never filled */
    T_NONE, T_FALSE, T_TRUE, T_INT, T_FLOAT, T_STR, T_BYTES,
    T_DICT, T_LIST, T_TUPLE,
    T_MARK,
    T_TAKEN,    /* a trace entry, read into the rows and dropped */
    T_STACKREF, /* a frames list made among the entries, dropped for its stack (v) */
};

/* The trace entry actions, as the rows carry them (walker.py's ACTIONS names them). */
enum {
    A_OTHER = 0, A_ALLOC, A_FREE_REQUESTED, A_FREE_COMPLETED, A_SEGMENT_ALLOC,
    A_SEGMENT_FREE, A_SEGMENT_MAP, A_SEGMENT_UNMAP, A_OOM, A_SNAPSHOT,
};

typedef struct {
    int64_t v;   /* the integer; a float's bits; a string's arena offset; a container */
    int32_t tag;
    int32_t len; /* a string's length */
} Value;

typedef struct {
    Value *items; /* a dict's keys and values, alternately */
    int64_t count, cap;
    int64_t memo_at; /* the memo slot that holds it, -1 if none */
    int64_t stack;  /* a frames list's stack id, -1 until an entry names it */
    int16_t tag;
    int16_t late;   /* made after the first entry was taken: only entries refer to it */
    int32_t device; /* lists: -2 not yet known, -1 not a device trace, else its device;
                       ALIAS: a frames list equal to its stack's first, items dropped */
} Container;

#define ALIAS (-3)

#define MAX_CATEGORIES 64

typedef struct {
    Value *stack;
    int64_t sp, stack_cap;
    Value *memo;
    int64_t memo_cap, memo_count;
    Container *containers;
    int64_t n_containers, containers_cap;
    int64_t *free_slots;
    int64_t n_free, free_cap;
    char *arena;
    int64_t arena_len, arena_cap;
    /* rows read and not yet taken */
    int32_t *r_device;
    int8_t *r_action;
    int16_t *r_category;
    int64_t *r_addr, *r_size, *r_stream, *r_time, *r_frames, *r_buffer;
    int64_t n_rows, rows_cap, rows_before;
    /* allocations not yet freed: address -> row (open addressing, slots by keyed_hash) */
    int64_t *h_key, *h_row;
    uint8_t *h_used;
    int64_t h_cap, h_count;
    /* stacks: frames lists of the same items (the same frame dicts) are one
     * stack; by the keyed hash of their items, open addressing; each stack's first list */
    int64_t *s_slot; /* stack id + 1, 0 empty */
    int64_t s_cap;
    int64_t *s_list;
    uint64_t *s_hash;
    int64_t n_stacks, stacks_cap;
    /* the `category` strings the profiler's conversion adds, interned */
    int64_t category_at[MAX_CATEGORIES];
    int32_t category_len[MAX_CATEGORIES];
    int32_t n_categories;
    uint64_t key[2]; /* the hashes' key: random, the caller's, for each walk */
    int64_t position; /* bytes read before the current piece */
    int stopped;
    Value root;
    char error[200];
} Walker;

static int fail(Walker *w, const char *message, int64_t at) {
    snprintf(w->error, sizeof w->error, "%s (at byte %lld)", message, (long long)at);
    return -1;
}

static int grow(void **data, int64_t *cap, int64_t need, size_t size) {
    if (need <= *cap) return 0;
    int64_t next = *cap ? *cap : 16;
    while (next < need) next *= 2;
    void *moved = realloc(*data, (size_t)next * size);
    if (!moved) return -1;
    *data = moved;
    *cap = next;
    return 0;
}

/* A walker whose tables hash with the key (k0, k1): random for each walk (the
 * caller draws it from the system's random source), so that no file can choose
 * addresses or stacks that fall in one slot. */
void *tpumem_walker_new_keyed(uint64_t k0, uint64_t k1) {
    Walker *w = calloc(1, sizeof(Walker));
    if (w) {
        w->key[0] = k0;
        w->key[1] = k1;
    }
    return w;
}

void tpumem_walker_free(void *handle) {
    Walker *w = handle;
    if (!w) return;
    for (int64_t i = 0; i < w->n_containers; i++) free(w->containers[i].items);
    free(w->containers); free(w->stack); free(w->memo); free(w->free_slots); free(w->arena);
    free(w->r_device); free(w->r_action); free(w->r_category); free(w->r_addr); free(w->r_size);
    free(w->r_stream); free(w->r_time); free(w->r_frames); free(w->r_buffer);
    free(w->h_key); free(w->h_row); free(w->h_used);
    free(w->s_slot); free(w->s_list); free(w->s_hash);
    free(w);
}

const char *tpumem_walker_error(void *handle) { return ((Walker *)handle)->error; }

static int push(Walker *w, Value v) {
    if (grow((void **)&w->stack, &w->stack_cap, w->sp + 1, sizeof(Value))) return -1;
    w->stack[w->sp++] = v;
    return 0;
}

static int64_t new_container(Walker *w, int32_t tag) {
    int64_t id;
    if (w->n_free) {
        id = w->free_slots[--w->n_free];
    } else {
        if (grow((void **)&w->containers, &w->containers_cap, w->n_containers + 1,
                 sizeof(Container)))
            return -1;
        id = w->n_containers++;
    }
    Container *c = &w->containers[id];
    memset(c, 0, sizeof *c);
    c->tag = tag;
    c->memo_at = -1;
    c->device = -2;
    c->stack = -1;
    c->late = w->rows_before + w->n_rows > 0;
    return id;
}

/* Frees a container's items and gives its slot to the next container made. It is
 * marked taken until then: a reference to it still on the stack reads as one. */
static int recycle(Walker *w, int64_t id) {
    Container *c = &w->containers[id];
    free(c->items);
    c->items = NULL;
    c->count = c->cap = 0;
    c->tag = T_TAKEN;
    if (grow((void **)&w->free_slots, &w->free_cap, w->n_free + 1, sizeof(int64_t))) return -1;
    w->free_slots[w->n_free++] = id;
    return 0;
}

static int add_items(Walker *w, int64_t id, const Value *items, int64_t n) {
    if (n <= 0) return 0;
    Container *c = &w->containers[id];
    if (grow((void **)&c->items, &c->cap, c->count + n, sizeof(Value))) return -1;
    memcpy(c->items + c->count, items, (size_t)n * sizeof(Value));
    c->count += n;
    return 0;
}

static int64_t find_mark(Walker *w) {
    for (int64_t i = w->sp - 1; i >= 0; i--)
        if (w->stack[i].tag == T_MARK) return i;
    return -1;
}

static int str_is(const Walker *w, Value v, const char *text) {
    size_t n = strlen(text);
    return v.tag == T_STR && (size_t)v.len == n && memcmp(w->arena + v.v, text, n) == 0;
}

/* The device of the list `id` on the stack at `at`, if it is one of device_traces'
 * lists: on the stack under it, the key, the outer list, a mark, then one list
 * per device in order (no mark where there is one device: pickle appends a lone
 * item without one). */
static int32_t device_of(Walker *w, int64_t id, int64_t at) {
    Container *c = &w->containers[id];
    if (c->device != -2) return c->device;
    int64_t i = at - 1;
    while (i >= 0 && w->stack[i].tag == T_LIST) i--;
    c->device = -1;
    if (i >= 2 && w->stack[i].tag == T_MARK && w->stack[i - 1].tag == T_LIST &&
        str_is(w, w->stack[i - 2], "device_traces"))
        c->device = (int32_t)(at - i - 1);
    else if (i >= 0 && at == i + 2 && str_is(w, w->stack[i], "device_traces"))
        c->device = 0;
    return c->device;
}

/* SipHash-1-3 (the keyed hash Python's and Rust's tables use against floods)
 * over 64-bit words. Addresses and a stack's items come from the file: with a
 * fixed hash, a file could choose a million of them that fall in one slot, and
 * each lookup would walk past all those before it (a 5.5 MB snapshot took a
 * minute); with a key it never sees, it cannot. */
typedef struct {
    uint64_t v0, v1, v2, v3;
    uint64_t words;
} Sip;

#define ROTL(x, b) (((x) << (b)) | ((x) >> (64 - (b))))

static inline void sip_round(Sip *s) {
    s->v0 += s->v1; s->v1 = ROTL(s->v1, 13); s->v1 ^= s->v0; s->v0 = ROTL(s->v0, 32);
    s->v2 += s->v3; s->v3 = ROTL(s->v3, 16); s->v3 ^= s->v2;
    s->v0 += s->v3; s->v3 = ROTL(s->v3, 21); s->v3 ^= s->v0;
    s->v2 += s->v1; s->v1 = ROTL(s->v1, 17); s->v1 ^= s->v2; s->v2 = ROTL(s->v2, 32);
}

static inline Sip sip_start(const uint64_t key[2]) {
    Sip s = {key[0] ^ 0x736f6d6570736575ull, key[1] ^ 0x646f72616e646f6dull,
             key[0] ^ 0x6c7967656e657261ull, key[1] ^ 0x7465646279746573ull, 0};
    return s;
}

static inline void sip_word(Sip *s, uint64_t m) {
    s->v3 ^= m;
    sip_round(s);
    s->v0 ^= m;
    s->words++;
}

static inline uint64_t sip_end(Sip *s) {
    uint64_t b = (s->words * 8) << 56;
    s->v3 ^= b;
    sip_round(s);
    s->v0 ^= b;
    s->v2 ^= 0xff;
    sip_round(s); sip_round(s); sip_round(s);
    return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

static inline uint64_t keyed_hash(const Walker *w, int64_t address) {
    Sip s = sip_start(w->key);
    sip_word(&s, (uint64_t)address);
    return sip_end(&s);
}

static int hash_grow(Walker *w) {
    int64_t old_cap = w->h_cap;
    int64_t *keys = w->h_key, *rows = w->h_row;
    uint8_t *used = w->h_used;
    int64_t cap = old_cap ? old_cap * 2 : 1024;
    w->h_key = malloc((size_t)cap * sizeof(int64_t));
    w->h_row = malloc((size_t)cap * sizeof(int64_t));
    w->h_used = calloc((size_t)cap, 1);
    if (!w->h_key || !w->h_row || !w->h_used) return -1;
    w->h_cap = cap;
    for (int64_t i = 0; i < old_cap; i++) {
        if (!used[i]) continue;
        uint64_t j = keyed_hash(w, keys[i]) & (uint64_t)(cap - 1);
        while (w->h_used[j]) j = (j + 1) & (uint64_t)(cap - 1);
        w->h_used[j] = 1;
        w->h_key[j] = keys[i];
        w->h_row[j] = rows[i];
    }
    free(keys); free(rows); free(used);
    return 0;
}

static int64_t hash_slot(const Walker *w, int64_t key) {
    uint64_t mask = (uint64_t)(w->h_cap - 1);
    uint64_t j = keyed_hash(w, key) & mask;
    while (w->h_used[j] && w->h_key[j] != key) j = (j + 1) & mask;
    return (int64_t)j;
}

static int hash_put(Walker *w, int64_t key, int64_t row) {
    if ((w->h_count + 1) * 2 > w->h_cap && hash_grow(w)) return -1;
    int64_t j = hash_slot(w, key);
    if (!w->h_used[j]) w->h_count++;
    w->h_used[j] = 1;
    w->h_key[j] = key;
    w->h_row[j] = row;
    return 0;
}

/* The row of the allocation at `key`, -1 if none; removed if `take`. */
static int64_t hash_get(Walker *w, int64_t key, int take) {
    if (!w->h_cap) return -1;
    int64_t j = hash_slot(w, key);
    if (!w->h_used[j]) return -1;
    int64_t row = w->h_row[j];
    if (!take) return row;
    /* backward-shift deletion: no tombstones, so lookups stay short */
    uint64_t mask = (uint64_t)(w->h_cap - 1);
    uint64_t hole = (uint64_t)j, k = (hole + 1) & mask;
    while (w->h_used[k]) {
        uint64_t home = keyed_hash(w, w->h_key[k]) & mask;
        if (((k - home) & mask) >= ((k - hole) & mask)) {
            w->h_key[hole] = w->h_key[k];
            w->h_row[hole] = w->h_row[k];
            hole = k;
        }
        k = (k + 1) & mask;
    }
    w->h_used[hole] = 0;
    w->h_count--;
    return row;
}

static int action_code(const Walker *w, Value v) {
    static const char *names[] = {"", "alloc", "free_requested", "free_completed",
                                  "segment_alloc", "segment_free", "segment_map",
                                  "segment_unmap", "oom", "snapshot"};
    for (int i = 1; i < 10; i++)
        if (str_is(w, v, names[i])) return i;
    return A_OTHER;
}

static int16_t category_code(Walker *w, Value v) {
    if (v.tag != T_STR) return -1;
    for (int i = 0; i < w->n_categories; i++)
        if (w->category_len[i] == v.len && memcmp(w->arena + w->category_at[i], w->arena + v.v,
                                                  (size_t)v.len) == 0)
            return (int16_t)i;
    if (w->n_categories == MAX_CATEGORIES) return -1;
    w->category_at[w->n_categories] = v.v;
    w->category_len[w->n_categories] = v.len;
    return (int16_t)w->n_categories++;
}

static uint64_t items_hash(const Walker *w, const Container *c) {
    Sip s = sip_start(w->key);
    for (int64_t i = 0; i < c->count; i++) {
        sip_word(&s, (uint64_t)c->items[i].tag << 32 | (uint32_t)c->items[i].len);
        sip_word(&s, (uint64_t)c->items[i].v);
    }
    return sip_end(&s);
}

static int same_items(const Container *a, const Container *b) {
    if (a->count != b->count) return 0;
    for (int64_t i = 0; i < a->count; i++)
        if (a->items[i].tag != b->items[i].tag || a->items[i].v != b->items[i].v ||
            a->items[i].len != b->items[i].len)
            return 0;
    return 1;
}

/* The stack id of the frames list `id`: PyTorch makes a list for every
 * allocation's stack, of frame dicts it shares, so equal lists are one stack. */
static int64_t stack_of(Walker *w, int64_t id) {
    Container *c = &w->containers[id];
    if (c->stack >= 0) return c->stack;
    if ((w->n_stacks + 1) * 2 > w->s_cap) {
        int64_t cap = w->s_cap ? w->s_cap * 2 : 1024;
        int64_t *slots = calloc((size_t)cap, sizeof(int64_t));
        if (!slots) return -2;
        for (int64_t k = 0; k < w->n_stacks; k++) {
            uint64_t j = w->s_hash[k] & (uint64_t)(cap - 1);
            while (slots[j]) j = (j + 1) & (uint64_t)(cap - 1);
            slots[j] = k + 1;
        }
        free(w->s_slot);
        w->s_slot = slots;
        w->s_cap = cap;
    }
    uint64_t h = items_hash(w, c), mask = (uint64_t)(w->s_cap - 1), j = h & mask;
    while (w->s_slot[j]) {
        int64_t k = w->s_slot[j] - 1;
        if (w->s_hash[k] == h && same_items(&w->containers[w->s_list[k]], c)) {
            /* One list a stack is kept; this one (every allocation has its own)
             * answers for it from now on, its items freed. Made among the entries,
             * PyTorch's layout refers to it from entries and the memo alone: the
             * memo slot then names the stack, and the list is gone (a dict that is
             * no entry holding it would read an empty list: not PyTorch's layout);
             * made before, it stays, an alias. */
            c->stack = k;
            if (c->late && c->memo_at >= 0) {
                Value ref = {k, T_STACKREF, 0};
                w->memo[c->memo_at] = ref;
                if (recycle(w, id)) return -2;
            } else {
                free(c->items);
                c->items = NULL;
                c->count = c->cap = 0;
                c->device = ALIAS;
            }
            return k;
        }
        j = (j + 1) & mask;
    }
    int64_t cap1 = w->stacks_cap, cap2 = w->stacks_cap;
    if (grow((void **)&w->s_list, &cap1, w->n_stacks + 1, sizeof(int64_t)) ||
        grow((void **)&w->s_hash, &cap2, w->n_stacks + 1, sizeof(uint64_t)))
        return -2;
    w->stacks_cap = cap1;
    int64_t k = w->n_stacks++;
    w->s_list[k] = id;
    w->s_hash[k] = h;
    w->s_slot[j] = k + 1;
    c->stack = k;
    return k;
}

/* Reads the entry dict `id` of device `device` into a row, then drops it. */
static int take_entry(Walker *w, int64_t id, int32_t device) {
    Container *c = &w->containers[id];
    int64_t addr = -1, device_free = -1, size = -1, stream = 0, time = -1, frames = -1;
    int16_t category = -1;
    int action = A_OTHER;
    for (int64_t i = 0; i + 1 < c->count; i += 2) {
        Value k = c->items[i], v = c->items[i + 1];
        if (k.tag != T_STR) continue;
        if (str_is(w, k, "action")) action = action_code(w, v);
        else if (v.tag == T_INT && str_is(w, k, "addr")) addr = v.v;
        else if (v.tag == T_INT && str_is(w, k, "device_free")) device_free = v.v;
        else if (v.tag == T_INT && str_is(w, k, "size")) size = v.v;
        else if (v.tag == T_INT && str_is(w, k, "stream")) stream = v.v;
        else if (v.tag == T_INT && str_is(w, k, "time_us")) time = v.v;
        else if (v.tag == T_STACKREF && str_is(w, k, "frames")) frames = v.v;
        else if (v.tag == T_LIST && str_is(w, k, "frames")) {
            /* (an empty list is no stack; a list already named keeps its stack) */
            const Container *list = &w->containers[v.v];
            frames = list->stack >= 0 ? list->stack : list->count ? stack_of(w, v.v) : -1;
            if (frames == -2) return -1;
        }
        else if (str_is(w, k, "category")) category = category_code(w, v);
    }
    if (action == A_OOM) addr = device_free; /* (an OOM has no address: what CUDA had free) */
    int64_t row = w->rows_before + w->n_rows, buffer = -1;
    if (action == A_ALLOC) {
        if (hash_put(w, addr, row)) return -1;
        buffer = row;
    } else if (action == A_FREE_REQUESTED) {
        buffer = hash_get(w, addr, 0);
    } else if (action == A_FREE_COMPLETED) {
        buffer = hash_get(w, addr, 1);
    }
    int64_t need = w->n_rows + 1, cap = w->rows_cap;
    if (need > cap) {
        int64_t c32 = cap, c8 = cap, c16 = cap, c64[6] = {cap, cap, cap, cap, cap, cap};
        if (grow((void **)&w->r_device, &c32, need, 4) || grow((void **)&w->r_action, &c8, need, 1) ||
            grow((void **)&w->r_category, &c16, need, 2) ||
            grow((void **)&w->r_addr, &c64[0], need, 8) || grow((void **)&w->r_size, &c64[1], need, 8) ||
            grow((void **)&w->r_stream, &c64[2], need, 8) || grow((void **)&w->r_time, &c64[3], need, 8) ||
            grow((void **)&w->r_frames, &c64[4], need, 8) || grow((void **)&w->r_buffer, &c64[5], need, 8))
            return -1;
        w->rows_cap = c32;
    }
    int64_t r = w->n_rows++;
    w->r_device[r] = device;
    w->r_action[r] = (int8_t)action;
    w->r_category[r] = category;
    w->r_addr[r] = addr;
    w->r_size[r] = size;
    w->r_stream[r] = stream;
    w->r_time[r] = time;
    w->r_frames[r] = frames;
    w->r_buffer[r] = buffer;
    /* drop the dict: its memo slot now says it was taken */
    if (c->memo_at >= 0) w->memo[c->memo_at].tag = T_TAKEN;
    return recycle(w, id);
}

static int is_entry(const Walker *w, Value v) {
    if (v.tag != T_DICT) return 0;
    const Container *c = &w->containers[v.v];
    for (int64_t i = 0; i + 1 < c->count; i += 2)
        if (str_is(w, c->items[i], "action") && c->items[i + 1].tag == T_STR) return 1;
    return 0;
}

/* Appends items to the list at stack[at]; trace entries become rows instead. */
static int append(Walker *w, int64_t at, const Value *items, int64_t n, int64_t pos) {
    if (at < 0 || w->stack[at].tag != T_LIST) return fail(w, "APPEND to something not a list", pos);
    int64_t id = w->stack[at].v;
    for (int64_t i = 0; i < n; i++) {
        if ((items[i].tag == T_DICT || items[i].tag == T_LIST) &&
            w->containers[items[i].v].tag == T_TAKEN)
            return fail(w, "refers back to a trace entry (not how PyTorch writes snapshots)", pos);
        if (is_entry(w, items[i])) {
            int32_t device = device_of(w, id, at);
            if (device >= 0) {
                if (take_entry(w, items[i].v, device)) return fail(w, "out of memory", pos);
                continue;
            }
        }
        if (add_items(w, id, &items[i], 1)) return fail(w, "out of memory", pos);
    }
    return 0;
}

static int set_memo(Walker *w, int64_t index, Value v, int64_t pos) {
    /* (every memo slot holds a value an opcode made: no index passes the bytes read) */
    if (index < 0 || index > pos) return fail(w, "memo index beyond what the pickle made", pos);
    int64_t old_cap = w->memo_cap;
    if (grow((void **)&w->memo, &w->memo_cap, index + 1, sizeof(Value)))
        return fail(w, "out of memory", pos);
    if (w->memo_cap > old_cap)
        memset(w->memo + old_cap, 0, (size_t)(w->memo_cap - old_cap) * sizeof(Value));
    if (w->memo[index].tag == T_EMPTY) w->memo_count++;
    w->memo[index] = v;
    if (v.tag == T_DICT || v.tag == T_LIST || v.tag == T_TUPLE) w->containers[v.v].memo_at = index;
    return 0;
}

static int get_memo(Walker *w, int64_t index, int64_t pos) {
    if (index < 0 || index >= w->memo_cap || w->memo[index].tag == T_EMPTY)
        return fail(w, "refers to a memo slot never filled", pos);
    if (w->memo[index].tag == T_TAKEN)
        return fail(w, "refers back to a trace entry (not how PyTorch writes snapshots)", pos);
    return push(w, w->memo[index]) ? fail(w, "out of memory", pos) : 0;
}

static int push_string(Walker *w, int32_t tag, const uint8_t *bytes, int64_t n, int64_t pos) {
    if (n > INT32_MAX) return fail(w, "string longer than 2 GiB", pos);
    if (grow((void **)&w->arena, &w->arena_cap, w->arena_len + n + 1, 1))
        return fail(w, "out of memory", pos);
    memcpy(w->arena + w->arena_len, bytes, (size_t)n);
    Value v = {w->arena_len, tag, (int32_t)n};
    w->arena_len += n;
    return push(w, v) ? fail(w, "out of memory", pos) : 0;
}

static int64_t little(const uint8_t *p, int n) {
    uint64_t x = 0;
    for (int i = n - 1; i >= 0; i--) x = (x << 8) | p[i];
    return (int64_t)x;
}

/* Makes a container of `tag` from the items above the top mark. */
static int from_mark(Walker *w, int32_t tag, int64_t pos) {
    int64_t mark = find_mark(w);
    if (mark < 0) return fail(w, "no mark to build from", pos);
    int64_t n = w->sp - mark - 1;
    if (tag == T_DICT && n % 2) return fail(w, "a dict with a key but no value", pos);
    int64_t id = new_container(w, tag);
    if (id < 0 || add_items(w, id, w->stack + mark + 1, n)) return fail(w, "out of memory", pos);
    w->sp = mark;
    Value v = {id, tag, 0};
    return push(w, v) ? fail(w, "out of memory", pos) : 0;
}

/* Reads opcodes from buf[0, size). Returns the bytes read (what is left is an
 * opcode cut at the end: hand it again with more), or -1 (tpumem_walker_error). */
int64_t tpumem_walker_feed(void *handle, const uint8_t *buf, int64_t size) {
    Walker *w = handle;
    int64_t i = 0;
    while (i < size && !w->stopped) {
        uint8_t op = buf[i];
        int64_t left = size - i - 1, pos = w->position + i;
        const uint8_t *arg = buf + i + 1;
        int64_t used = 1; /* bytes this opcode takes, when all there */
        Value v = {0, 0, 0};
        switch (op) {
        case 0x80: /* PROTO */
            if (left < 1) goto cut;
            if (arg[0] < 2 || arg[0] > 5) return fail(w, "pickle protocol not 2 to 5", pos);
            used = 2;
            break;
        case 0x95: /* FRAME: a length; the opcodes inside follow as usual */
            if (left < 8) goto cut;
            used = 9;
            break;
        case '(':
            v.tag = T_MARK;
            if (push(w, v)) return fail(w, "out of memory", pos);
            break;
        case '}': case ']': case ')': {
            int32_t tag = op == '}' ? T_DICT : op == ']' ? T_LIST : T_TUPLE;
            int64_t id = new_container(w, tag);
            if (id < 0) return fail(w, "out of memory", pos);
            v.tag = tag; v.v = id;
            if (push(w, v)) return fail(w, "out of memory", pos);
            break;
        }
        case 'd': if (from_mark(w, T_DICT, pos)) return -1; break;
        case 'l': if (from_mark(w, T_LIST, pos)) return -1; break;
        case 't': if (from_mark(w, T_TUPLE, pos)) return -1; break;
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            int64_t n = op - 0x84;
            if (w->sp < n) return fail(w, "stack underflow", pos);
            for (int64_t k = w->sp - n; k < w->sp; k++)
                if (w->stack[k].tag == T_MARK) return fail(w, "a mark inside a tuple", pos);
            int64_t id = new_container(w, T_TUPLE);
            if (id < 0 || add_items(w, id, w->stack + w->sp - n, n)) return fail(w, "out of memory", pos);
            w->sp -= n;
            v.tag = T_TUPLE; v.v = id;
            if (push(w, v)) return fail(w, "out of memory", pos);
            break;
        }
        case 's': { /* SETITEM */
            if (w->sp < 3 || w->stack[w->sp - 3].tag != T_DICT) return fail(w, "SETITEM without a dict", pos);
            if (w->stack[w->sp - 1].tag == T_MARK || w->stack[w->sp - 2].tag == T_MARK)
                return fail(w, "a mark as a dict's item", pos);
            if (add_items(w, w->stack[w->sp - 3].v, w->stack + w->sp - 2, 2)) return fail(w, "out of memory", pos);
            w->sp -= 2;
            break;
        }
        case 'u': { /* SETITEMS */
            int64_t mark = find_mark(w);
            if (mark < 1 || w->stack[mark - 1].tag != T_DICT) return fail(w, "SETITEMS without a dict", pos);
            int64_t n = w->sp - mark - 1;
            if (n % 2) return fail(w, "a dict with a key but no value", pos);
            if (add_items(w, w->stack[mark - 1].v, w->stack + mark + 1, n)) return fail(w, "out of memory", pos);
            w->sp = mark;
            break;
        }
        case 'a': /* APPEND */
            if (w->sp < 2 || w->stack[w->sp - 1].tag == T_MARK) return fail(w, "APPEND without a list", pos);
            if (append(w, w->sp - 2, w->stack + w->sp - 1, 1, pos)) return -1;
            w->sp -= 1;
            break;
        case 'e': { /* APPENDS */
            int64_t mark = find_mark(w);
            if (mark < 1) return fail(w, "APPENDS without a list", pos);
            int64_t n = w->sp - mark - 1;
            if (append(w, mark - 1, w->stack + mark + 1, n, pos)) return -1;
            w->sp = mark;
            break;
        }
        case 0x94: /* MEMOIZE */
            if (!w->sp || w->stack[w->sp - 1].tag == T_MARK) return fail(w, "MEMOIZE of nothing", pos);
            if (set_memo(w, w->memo_count, w->stack[w->sp - 1], pos)) return -1;
            break;
        case 'q': case 'r': { /* BINPUT, LONG_BINPUT */
            int n = op == 'q' ? 1 : 4;
            if (left < n) goto cut;
            if (!w->sp || w->stack[w->sp - 1].tag == T_MARK) return fail(w, "PUT of nothing", pos);
            if (set_memo(w, n == 1 ? arg[0] : (int64_t)(uint32_t)little(arg, 4), w->stack[w->sp - 1], pos)) return -1;
            used = 1 + n;
            break;
        }
        case 'h': case 'j': { /* BINGET, LONG_BINGET */
            int n = op == 'h' ? 1 : 4;
            if (left < n) goto cut;
            if (get_memo(w, n == 1 ? arg[0] : (int64_t)(uint32_t)little(arg, 4), pos)) return -1;
            used = 1 + n;
            break;
        }
        case 'K': case 'M': case 'J': { /* BININT1, BININT2, BININT */
            int n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
            if (left < n) goto cut;
            v.tag = T_INT;
            v.v = n == 4 ? (int64_t)(int32_t)(uint32_t)little(arg, 4) : little(arg, n);
            if (push(w, v)) return fail(w, "out of memory", pos);
            used = 1 + n;
            break;
        }
        case 0x8a: case 0x8b: { /* LONG1, LONG4: little-endian two's complement */
            int head = op == 0x8a ? 1 : 4;
            if (left < head) goto cut;
            int64_t n = head == 1 ? arg[0] : (int64_t)(uint32_t)little(arg, 4);
            /* (a snapshot's integers are int64: 8 bytes; Python writes 2**63 and
             * above in 9, which no field of a snapshot holds) */
            if (n > 8) return fail(w, "an integer beyond 64 bits", pos);
            if (left < head + n) goto cut;
            int64_t x = 0;
            if (n) {
                int k = (int)n;
                x = little(arg + head, k);
                if (k < 8 && (arg[head + k - 1] & 0x80)) x |= (int64_t)(~(uint64_t)0 << (8 * k));
            }
            v.tag = T_INT; v.v = x;
            if (push(w, v)) return fail(w, "out of memory", pos);
            used = 1 + head + n;
            break;
        }
        case 'N': v.tag = T_NONE; if (push(w, v)) return fail(w, "out of memory", pos); break;
        case 0x88: v.tag = T_TRUE; if (push(w, v)) return fail(w, "out of memory", pos); break;
        case 0x89: v.tag = T_FALSE; if (push(w, v)) return fail(w, "out of memory", pos); break;
        case 'G': { /* BINFLOAT, big-endian */
            if (left < 8) goto cut;
            uint64_t x = 0;
            for (int k = 0; k < 8; k++) x = (x << 8) | arg[k];
            v.tag = T_FLOAT; v.v = (int64_t)x;
            if (push(w, v)) return fail(w, "out of memory", pos);
            used = 9;
            break;
        }
        case 0x8c: case 'X': case 0x8d: /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
        case 'C': case 'B': case 0x8e: { /* SHORT_BINBYTES, BINBYTES, BINBYTES8 */
            int head = (op == 0x8c || op == 'C') ? 1 : (op == 'X' || op == 'B') ? 4 : 8;
            if (left < head) goto cut;
            int64_t n = head == 1 ? arg[0] : head == 4 ? (int64_t)(uint32_t)little(arg, 4) : little(arg, 8);
            if (n < 0 || n > INT32_MAX) return fail(w, "string longer than 2 GiB", pos);
            if (left < head + n) goto cut;
            int32_t tag = (op == 0x8c || op == 'X' || op == 0x8d) ? T_STR : T_BYTES;
            if (push_string(w, tag, arg + head, n, pos)) return -1;
            used = 1 + head + n;
            break;
        }
        case '.': /* STOP */
            if (w->sp != 1 || w->stack[0].tag == T_MARK) return fail(w, "STOP with the stack not one value", pos);
            w->root = w->stack[0];
            w->sp = 0;
            w->stopped = 1;
            break;
        default: {
            char message[96];
            snprintf(message, sizeof message,
                     "opcode 0x%02x: the pickle holds more than plain data (dicts, lists, "
                     "strings, numbers)", op);
            return fail(w, message, pos);
        }
        }
        i += used;
    }
cut: /* (the piece is read, or an opcode is cut at its end: read again with the next) */
    w->position += i;
    return i;
}

int tpumem_walker_stopped(void *handle) { return ((Walker *)handle)->stopped; }

int64_t tpumem_walker_rows(void *handle) { return ((Walker *)handle)->n_rows; }

/* Copies the rows read so far out, and forgets them. */
void tpumem_walker_take(void *handle, int32_t *device, int8_t *action, int16_t *category,
                        int64_t *addr, int64_t *size, int64_t *stream, int64_t *time,
                        int64_t *frames, int64_t *buffer) {
    Walker *w = handle;
    int64_t n = w->n_rows;
    if (!n) return;
    memcpy(device, w->r_device, (size_t)n * 4);
    memcpy(action, w->r_action, (size_t)n);
    memcpy(category, w->r_category, (size_t)n * 2);
    memcpy(addr, w->r_addr, (size_t)n * 8);
    memcpy(size, w->r_size, (size_t)n * 8);
    memcpy(stream, w->r_stream, (size_t)n * 8);
    memcpy(time, w->r_time, (size_t)n * 8);
    memcpy(frames, w->r_frames, (size_t)n * 8);
    memcpy(buffer, w->r_buffer, (size_t)n * 8);
    w->rows_before += n;
    w->n_rows = 0;
}

/* Allocations the trace made and did not free: their addresses and rows. */
int64_t tpumem_walker_live(void *handle, int64_t *addr, int64_t *row, int64_t cap) {
    Walker *w = handle;
    int64_t n = 0;
    for (int64_t j = 0; j < w->h_cap; j++) {
        if (!w->h_used[j]) continue;
        if (n < cap) { addr[n] = w->h_key[j]; row[n] = w->h_row[j]; }
        n++;
    }
    return n;
}

/* The kept values, for Python to read after the walk: a value's tag, payload and
 * length; a container's length and items; a string's bytes. */
void tpumem_walker_root(void *handle, int32_t *tag, int64_t *v, int32_t *len) {
    Walker *w = handle;
    *tag = w->root.tag; *v = w->root.v; *len = w->root.len;
}

static int64_t resolved(const Walker *w, int64_t id) {
    if (id < 0 || id >= w->n_containers) return -1;
    const Container *c = &w->containers[id];
    return c->device == ALIAS ? w->s_list[c->stack] : id;
}

int64_t tpumem_walker_length(void *handle, int64_t id) {
    Walker *w = handle;
    id = resolved(w, id);
    return id >= 0 ? w->containers[id].count : -1;
}

int tpumem_walker_item(void *handle, int64_t id, int64_t index, int32_t *tag, int64_t *v,
                       int32_t *len) {
    Walker *w = handle;
    id = resolved(w, id);
    if (id < 0 || index < 0 || index >= w->containers[id].count) return -1;
    Value x = w->containers[id].items[index];
    *tag = x.tag; *v = x.v; *len = x.len;
    return 0;
}

const char *tpumem_walker_bytes(void *handle, int64_t offset) {
    return ((Walker *)handle)->arena + offset;
}

int tpumem_walker_category(void *handle, int index, int64_t *offset, int32_t *len) {
    Walker *w = handle;
    if (index < 0 || index >= w->n_categories) return -1;
    *offset = w->category_at[index];
    *len = w->category_len[index];
    return 0;
}

/* The frames list that stands for a stack. */
int64_t tpumem_walker_stack_list(void *handle, int64_t stack) {
    Walker *w = handle;
    return stack >= 0 && stack < w->n_stacks ? w->s_list[stack] : -1;
}
