/* The hot loops of reading an XSpace's memory events, in C: walking a line's
 * events, decoding each memory event's fields, finding the stat headers of
 * step marks and pairing frees with their allocations. numpy does the same work a field
 * of every event per pass (wire.py, regular_stats.py); a pass costs about 25 array
 * operations, so an event costs about 2 us, where one loop over its bytes costs
 * tens of nanoseconds. That matters where the reading shares the cores the
 * program trains on: TensorFlow's profiler sessions, read while the script runs.
 *
 * Plain C with no Python API: built beside the package when a compiler is there
 * (setuptools, optional) and called through ctypes, which lets go of the GIL. No
 * input can make it read outside [buf, buf + size): every read is checked against
 * its message's end, and what is not in the usual shape is left to the numpy
 * decoder (which reads any valid encoding, and names what is invalid).
 */

#include <stdint.h>
#include <string.h>

/* XStat's value fields, as their one-byte tags (field << 3 | wire type): the tags
 * regular_stats.py stores, so that the tables mean the same from either decoder. */
enum { DOUBLE_TAG = 0x11, UINT64_TAG = 0x18, INT64_TAG = 0x20, STRING_TAG = 0x2A, REF_TAG = 0x38 };

/* Reads a varint at *pos, below end. Returns 0 if it runs past end or past 10 bytes. */
static inline int read_varint(const uint8_t *buf, int64_t *pos, int64_t end, uint64_t *value) {
    if (*pos < end && buf[*pos] < 0x80) { /* (most are one byte: tags, ids, lengths) */
        *value = buf[(*pos)++];
        return 1;
    }
    uint64_t result = 0;
    for (int shift = 0; shift < 70 && *pos < end; shift += 7) {
        uint8_t byte = buf[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *value = result;
            return 1;
        }
    }
    return 0;
}

/* The events of one line: fields 4 (XLine.events) one after the other from `pos`
 * (the first one's tag) to where another field begins or the line ends. Writes
 * each payload's start and end, and its metadata id where a field 1 comes first
 * (0 otherwise, as protobuf leaves an id of 0 out). Returns the count, or -1 if an
 * event runs past the line's end, or more than `cap` are found. */
int64_t tpumem_line_events(const uint8_t *buf, int64_t pos, int64_t end, int64_t *starts,
                           int64_t *ends, uint64_t *ids, int64_t cap) {
    int64_t count = 0;
    while (pos < end && buf[pos] == 0x22) {
        uint64_t size;
        pos += 1;
        if (!read_varint(buf, &pos, end, &size) || size > (uint64_t)(end - pos) || count == cap)
            return -1;
        int64_t stop = pos + (int64_t)size, at = pos + 1;
        uint64_t id = 0;
        if (pos < stop && buf[pos] == 0x08 && !read_varint(buf, &at, stop, &id))
            return -1;
        starts[count] = pos;
        ends[count] = stop;
        ids[count] = id;
        count++;
        pos = stop;
    }
    return count;
}

/* One XStat in [pos, end): its metadata id, value tag, raw value and, for a
 * string, its length (the value is then where its bytes begin). Returns 0 for any
 * other shape: another field, a second value, bytes, a value missing. */
static int read_stat(const uint8_t *buf, int64_t pos, int64_t end, uint64_t *id, uint8_t *tag,
                     uint64_t *value, int64_t *length) {
    *id = 0;
    *tag = 0;
    while (pos < end) {
        uint8_t field = buf[pos++];
        if (field == 0x08 && *tag == 0) {
            if (!read_varint(buf, &pos, end, id))
                return 0;
        } else if (*tag != 0) {
            return 0;
        } else if (field == UINT64_TAG || field == INT64_TAG || field == REF_TAG) {
            if (!read_varint(buf, &pos, end, value))
                return 0;
            *tag = field;
        } else if (field == DOUBLE_TAG) {
            if (end - pos < 8)
                return 0;
            memcpy(value, buf + pos, 8); /* (little-endian, as protobuf writes it) */
            pos += 8;
            *tag = field;
        } else if (field == STRING_TAG) {
            uint64_t size;
            if (!read_varint(buf, &pos, end, &size) || size > (uint64_t)(end - pos))
                return 0;
            *value = (uint64_t)pos;
            *length = (int64_t)size;
            pos += (int64_t)size;
            *tag = field;
        } else {
            return 0;
        }
    }
    return *tag != 0;
}

/* Where one stat's values go: a numeric column (int64 or double values, and
 * whether present) or a string column (a reference to a stat metadata entry, or
 * an inline string's start and length), one row per event. */
enum { SKIPPED = 0, INTEGERS = 1, DOUBLES = 2, STRINGS = 3 };
typedef struct {
    int64_t kind;
    void *values;
    uint8_t *present;
    int64_t *ref;
    int64_t *start;
    int64_t *length;
} column_t;

/* A double as the int64 numpy's cast gives (x86's: the lowest int64 for NaN and
 * what is out of range, else truncated toward zero). */
static int64_t truncated(double value) {
    if (!(value > -9223372036854775808.0 && value < 9223372036854775808.0))
        return INT64_MIN;
    return (int64_t)value;
}

static void store(const column_t *column, int64_t row, uint8_t tag, uint64_t raw,
                  int64_t string_length) {
    double real;
    switch (column->kind) {
    case INTEGERS:
    case DOUBLES:
        /* As memory_events does it: a string's value is 0, a double keeps its
         * value, other values their int64 bits. */
        if (tag == STRING_TAG)
            raw = 0;
        memcpy(&real, &raw, 8);
        if (column->kind == INTEGERS)
            ((int64_t *)column->values)[row] = tag == DOUBLE_TAG ? truncated(real) : (int64_t)raw;
        else
            ((double *)column->values)[row] = tag == DOUBLE_TAG ? real : (double)(int64_t)raw;
        column->present[row] = 1;
        break;
    case STRINGS:
        column->ref[row] = tag == REF_TAG ? (int64_t)raw : -1;
        column->start[row] = tag == STRING_TAG ? (int64_t)raw : 0;
        column->length[row] = tag == STRING_TAG ? string_length : -1;
        break;
    }
}

static void clear(const column_t *column, int64_t row) {
    switch (column->kind) {
    case INTEGERS:
    case DOUBLES:
        column->present[row] = 0;
        break;
    case STRINGS:
        column->ref[row] = -1;
        column->start[row] = 0;
        column->length[row] = -1;
        break;
    }
}

/* Decodes `count` events (payloads [starts[i], ends[i])): their offset_ps
 * (field 2) into `offset`, and each stat whose metadata id has a code in
 * `id_codes` (0: not wanted) into row `first_row + i` of columns[code]. An event
 * with any field but 1-4, a leading field after a stat, or a stat of another
 * shape is marked `irregular`, and its rows are cleared: the numpy decoder reads
 * it. */
void tpumem_decode_events(const uint8_t *buf, const int64_t *starts, const int64_t *ends,
                          int64_t count, const int8_t *id_codes, int64_t id_codes_len,
                          const column_t *columns, int64_t codes, int64_t first_row,
                          int64_t *offset, uint8_t *irregular) {
    for (int64_t event = 0; event < count; event++) {
        int64_t pos = starts[event], end = ends[event], row = first_row + event;
        int in_stats = 0, odd = 0;
        offset[event] = 0;
        while (pos < end && !odd) {
            uint8_t field = buf[pos++];
            uint64_t number;
            if (field == 0x22) { /* a stat */
                uint64_t size, id, raw = 0;
                int64_t string_length = 0;
                uint8_t value_tag;
                if (!read_varint(buf, &pos, end, &size) || size > (uint64_t)(end - pos) ||
                    !read_stat(buf, pos, pos + (int64_t)size, &id, &value_tag, &raw,
                               &string_length)) {
                    odd = 1;
                    break;
                }
                pos += (int64_t)size;
                in_stats = 1;
                int code = id < (uint64_t)id_codes_len ? id_codes[id] : 0;
                if (code > 0 && code < codes)
                    store(&columns[code], row, value_tag, raw, string_length);
            } else if ((field == 0x08 || field == 0x10 || field == 0x18) && !in_stats) {
                if (!read_varint(buf, &pos, end, &number))
                    odd = 1;
                else if (field == 0x10)
                    offset[event] = (int64_t)number;
            } else {
                odd = 1;
            }
        }
        irregular[event] = (uint8_t)odd;
        if (odd)
            for (int64_t code = 0; code < codes; code++)
                clear(&columns[code], row);
    }
}

/* Where a stat header for one metadata id may begin in [first, end): the bytes
 * `pattern` (a 0x22 tag, a one-byte length that may be anything, 0x08, then the
 * id's varint), found by memchr on the id's last byte, which is rarer than a tag.
 * Writes up to `cap` positions, in order; returns how many there are in all. */
int64_t tpumem_find_stat_headers(const uint8_t *buf, int64_t first, int64_t end,
                                 const uint8_t *pattern, int64_t length, int64_t *found,
                                 int64_t cap) {
    int64_t count = 0;
    if (length < 4 || end - first < length)
        return 0;
    const uint8_t last = pattern[length - 1];
    const uint8_t *at = buf + first + length - 1, *stop = buf + end;
    while (at < stop && (at = memchr(at, last, (size_t)(stop - at))) != NULL) {
        const uint8_t *begin = at - (length - 1);
        if (begin[0] == pattern[0] && memcmp(begin + 2, pattern + 2, (size_t)(length - 3)) == 0) {
            if (count < cap)
                found[count] = begin - buf;
            count++;
        }
        at++;
    }
    return count;
}

/* Buffer ids for allocator events in time order (trace_columns.pair_buffers: the
 * same ids, from one pass instead of two sorts). An allocation's id is its row; a
 * free takes the id of the event before it at the same place (allocator `codes`,
 * `address`) if that event is an allocation, else -1; a negative code (no
 * allocator) pairs with nothing. `table` has `slots` entries (a power of two,
 * more than the rows), each -1: for each place, the row of its latest event. */
void tpumem_pair_buffers(const int64_t *codes, const int64_t *address, const uint8_t *is_alloc,
                         int64_t count, int64_t *table, int64_t slots, int64_t *ids) {
    const uint64_t mask = (uint64_t)slots - 1;
    for (int64_t row = 0; row < count; row++) {
        ids[row] = is_alloc[row] ? row : -1;
        if (codes[row] < 0)
            continue;
        /* splitmix64's finalizer over the place, for addresses that share low bits */
        uint64_t hash = (uint64_t)address[row] ^ ((uint64_t)codes[row] * 0x9E3779B97F4A7C15ULL);
        hash = (hash ^ (hash >> 30)) * 0xBF58476D1CE4E5B9ULL;
        hash = (hash ^ (hash >> 27)) * 0x94D049BB133111EBULL;
        hash ^= hash >> 31;
        uint64_t slot = hash & mask;
        while (table[slot] >= 0) {
            int64_t other = table[slot];
            if (codes[other] == codes[row] && address[other] == address[row])
                break;
            slot = (slot + 1) & mask;
        }
        int64_t before = table[slot];
        if (before >= 0 && !is_alloc[row] && is_alloc[before])
            ids[row] = before;
        table[slot] = row;
    }
}
