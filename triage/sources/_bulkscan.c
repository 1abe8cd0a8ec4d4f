/* The bulk split of scan.split_block, compiled: the lines no bulk pattern claims, without an object per line;
 * and the lines' digit forms (scan.digit_forms).
 *
 * A busy server's log is 99 % request and access lines. In Python every line of a block becomes a bytes object
 * (bytes.split) before a regex searches its head, and that is most of the cost of a 1 GiB log. Here the block is
 * walked once: memchr finds each line's end, memmem looks for each pattern's shared piece and then its anchors in
 * the line's first `window` bytes, and only the lines left for the parser become objects (text where the reader
 * would decode every one of them alike, else bytes). A pattern whose shared piece is nowhere in the block (a stats
 * or DEBUG log's blocks) claims no line and is not looked for line by line. scan.py keeps the same split in Python for a machine where
 * this did not build; tests/test_properties.py holds the two to the same answer on drawn blocks.
 *
 * The quiet lines of a DEBUG log (scan.QuietLines.mask) are found here too: each line's digit form, kept once in a
 * hash table, the prefix's end asked of Python once per form of a line's start, each form's message searched for
 * the stops in one call of the Aho-Corasick automaton, and the neighbours' test, with no object per line.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* memmem */
#endif
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* How common a byte is in a log's text, higher for more common: a space and the lowercase letters by their
 * frequency in English, digits and the punctuation of timestamps and paths, then capitals, then the rest. */
static int commonness(unsigned char c) {
    static const char letters[] = "zqjxkvbywgpfmucdlhrsnioate";      /* rarest first */
    if (c == 0)
        return 0;
    if (c == ' ')
        return 40;
    const char *at = strchr(letters, c);
    if (at)
        return 10 + (int)(at - letters);
    if ((c >= '0' && c <= '9') || strchr(".:,/=-_()[]'\"", c))
        return 25;
    return c >= 'A' && c <= 'Z' ? 5 : 0;
}

/* The place of the needle's least common byte, which `find_at` looks for. */
static Py_ssize_t rarest(const char *needle, Py_ssize_t len) {
    Py_ssize_t pick = 0;
    for (Py_ssize_t i = 1; i < len; i++)
        if (commonness((unsigned char)needle[i]) < commonness((unsigned char)needle[pick]))
            pick = i;
    return pick;
}

/* Where `needle` (non-empty) first occurs in data[0:size], or NULL. memchr looks for the needle's byte at `pick`
 * (its least common, `rarest`), and a compare checks each place it finds: glibc's memmem reads about two
 * instructions a byte of a log, memchr a fraction of one. */
static const char *find_at(const char *data, Py_ssize_t size, const char *needle, Py_ssize_t len, Py_ssize_t pick) {
    if (size < len)
        return NULL;
    const char *at = data + pick, *end = data + size - len + pick + 1;   /* where the picked byte may stand */
    while (at < end) {
        const char *hit = memchr(at, (unsigned char)needle[pick], (size_t)(end - at));
        if (!hit)
            return NULL;
        if (memcmp(hit - pick, needle, (size_t)len) == 0)
            return hit - pick;
        at = hit + 1;
    }
    return NULL;
}

static const char *find(const char *data, Py_ssize_t size, const char *needle, Py_ssize_t len) {
    return find_at(data, size, needle, len, rarest(needle, len));
}

typedef struct {
    const char *needle;         /* a piece of text every anchor holds (length 0: none) */
    Py_ssize_t needle_len;
    Py_ssize_t anchors;
    const char **anchor;
    Py_ssize_t *anchor_len;
    int in_block;               /* the needle occurs in the block: without it no line of the block is claimed */
} Pattern;

static int claims(const Pattern *pattern, const char *head, Py_ssize_t head_len) {
    if (!pattern->in_block)
        return 0;
    if (pattern->needle_len && !memmem(head, (size_t)head_len, pattern->needle, (size_t)pattern->needle_len))
        return 0;
    for (Py_ssize_t a = 0; a < pattern->anchors; a++)
        if (memmem(head, (size_t)head_len, pattern->anchor[a], (size_t)pattern->anchor_len[a]))
            return 1;
    return 0;
}

/* Read `patterns` (a tuple of (needle, anchor, ...) tuples of bytes) into `out`; the bytes stay owned by it. */
static int read_patterns(PyObject *patterns, Pattern *out, Py_ssize_t count, const char *block, Py_ssize_t size) {
    for (Py_ssize_t p = 0; p < count; p++) {
        PyObject *pattern = PyTuple_GET_ITEM(patterns, p);
        if (!PyTuple_Check(pattern) || PyTuple_GET_SIZE(pattern) < 2) {
            PyErr_SetString(PyExc_TypeError, "a pattern is a tuple (needle, anchor, ...) of bytes");
            return -1;
        }
        Py_ssize_t items = PyTuple_GET_SIZE(pattern);
        for (Py_ssize_t i = 0; i < items; i++) {
            PyObject *item = PyTuple_GET_ITEM(pattern, i);
            if (!PyBytes_Check(item) || (i > 0 && PyBytes_GET_SIZE(item) == 0)) {
                PyErr_SetString(PyExc_TypeError, "a needle is bytes, an anchor non-empty bytes");
                return -1;
            }
        }
        Pattern *it = &out[p];
        it->needle = PyBytes_AS_STRING(PyTuple_GET_ITEM(pattern, 0));
        it->needle_len = PyBytes_GET_SIZE(PyTuple_GET_ITEM(pattern, 0));
        it->anchors = items - 1;
        it->anchor = PyMem_Calloc((size_t)it->anchors, sizeof(char *));
        it->anchor_len = PyMem_Calloc((size_t)it->anchors, sizeof(Py_ssize_t));
        if (!it->anchor || !it->anchor_len) {
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t a = 0; a < it->anchors; a++) {
            it->anchor[a] = PyBytes_AS_STRING(PyTuple_GET_ITEM(pattern, a + 1));
            it->anchor_len[a] = PyBytes_GET_SIZE(PyTuple_GET_ITEM(pattern, a + 1));
        }
        it->in_block = it->needle_len == 0 || find(block, size, it->needle, it->needle_len) != NULL;
    }
    return 0;
}

/* A kept line: its place in the block and where its bytes are. */
typedef struct {
    Py_ssize_t index, at, len;
} Kept;

/* Whether every byte is below 0x80, eight at a time. */
static int ascii_only(const char *bytes, Py_ssize_t len) {
    uint64_t seen = 0, word;
    Py_ssize_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&word, bytes + i, 8);
        seen |= word;
    }
    for (; i < len; i++)
        seen |= (unsigned char)bytes[i];
    return (seen & 0x8080808080808080ULL) == 0;
}

/* Whether the line can be handed on as text, decoded as files._decoded would decode it: ASCII, no NUL, not ending
 * in a carriage return (a CR LF file), at most `limit` bytes. `clean`: the whole block is ASCII without a NUL, so
 * only the ending and the length are left to check. */
static int plain_text(const char *line, Py_ssize_t len, Py_ssize_t limit, int clean) {
    if (len > limit || line[len - 1] == '\r')
        return 0;
    return clean || (ascii_only(line, len) && !memchr(line, '\0', (size_t)len));
}

/* The two columns of kept lines: their places, and their bytes, or their text where every one of them is plain. */
static int columns(const char *data, const Kept *kept, Py_ssize_t count, int as_text, PyObject **indexes,
                   PyObject **lines) {
    *indexes = PyList_New(count);
    *lines = PyList_New(count);
    if (!*indexes || !*lines)
        return -1;
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *index = PyLong_FromSsize_t(kept[k].index);
        PyObject *line = as_text ? PyUnicode_New(kept[k].len, 127)     /* ASCII, checked: copied as it is */
                                 : PyBytes_FromStringAndSize(data + kept[k].at, kept[k].len);
        if (line && as_text)
            memcpy(PyUnicode_1BYTE_DATA(line), data + kept[k].at, (size_t)kept[k].len);
        if (!index || !line) {
            Py_XDECREF(index);
            Py_XDECREF(line);
            return -1;
        }
        PyList_SET_ITEM(*indexes, k, index);
        PyList_SET_ITEM(*lines, k, line);
    }
    return 0;
}

PyDoc_STRVAR(split_bulk_doc,
"split_bulk(block, patterns, window, text_limit=0) -> (indexes, lines, line_count, counts, non_empty)\n\n"
"The lines of `block` (split at b'\\n'; a last newline ends the last line) no pattern claims: each pattern is a\n"
"tuple (needle, anchor, ...) and claims a line when one of its anchors occurs in the line's first `window`\n"
"bytes (the needle is a piece of text every anchor holds, b'' for none). A line counts for the first pattern\n"
"that claims it; empty lines are neither claimed nor kept. `indexes` are the kept lines' places in the block\n"
"(from 0), `counts` the lines each pattern claimed, `non_empty` one byte per line, 1 where it is not empty.\n"
"`lines` are bytes; with a `text_limit`, str where every kept line is ASCII, holds no NUL, does not end in a\n"
"carriage return and is at most `text_limit` bytes long (what files._decoded decodes line by line).");

static PyObject *split_bulk(PyObject *Py_UNUSED(module), PyObject *args) {
    Py_buffer block;
    PyObject *patterns;
    Py_ssize_t window, text_limit = 0;
    if (!PyArg_ParseTuple(args, "y*O!n|n:split_bulk", &block, &PyTuple_Type, &patterns, &window, &text_limit))
        return NULL;
    const char *data = block.buf;
    Py_ssize_t size = block.len, count = PyTuple_GET_SIZE(patterns), lines_in_block = 0, kept_count = 0;
    PyObject *indexes = NULL, *lines = NULL, *counts = NULL, *non_empty = NULL, *result = NULL;
    Py_ssize_t *claimed = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t));
    Pattern *read = PyMem_Calloc((size_t)count + 1, sizeof(Pattern));
    char *flags = NULL;
    Kept *kept = NULL;
    Py_ssize_t kept_room = 256;
    int as_text = text_limit > 0, clean = 0;
    if (!claimed || !read) {
        PyErr_NoMemory();
        goto done;
    }
    if (window < 0) {
        PyErr_SetString(PyExc_ValueError, "window must not be negative");
        goto done;
    }
    if (read_patterns(patterns, read, count, data, size) < 0)
        goto done;
    clean = as_text && ascii_only(data, size) && !memchr(data, '\0', (size_t)size);
    /* One byte per line: a line is at least its newline, but the last may lack it. The kept lines grow as found. */
    flags = PyMem_Malloc((size_t)size + 1);
    kept = PyMem_Malloc((size_t)kept_room * sizeof(Kept));
    if (!flags || !kept) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t at = 0; at < size; lines_in_block++) {
        const char *line = data + at;
        const char *end = memchr(line, '\n', (size_t)(size - at));
        Py_ssize_t len = end ? end - line : size - at, p = 0;
        flags[lines_in_block] = len > 0;
        if (len) {
            Py_ssize_t head = len < window ? len : window;
            while (p < count && !claims(&read[p], line, head))
                p++;
            if (p < count) {
                claimed[p]++;
            } else {
                if (kept_count == kept_room) {
                    Kept *more = PyMem_Realloc(kept, (size_t)(kept_room *= 2) * sizeof(Kept));
                    if (!more) {
                        PyErr_NoMemory();
                        goto done;
                    }
                    kept = more;
                }
                kept[kept_count++] = (Kept){lines_in_block, at, len};
                as_text = as_text && plain_text(line, len, text_limit, clean);
            }
        }
        at += len + 1;
    }
    if (columns(data, kept, kept_count, as_text, &indexes, &lines) < 0)
        goto done;
    counts = PyList_New(count);
    if (!counts)
        goto done;
    for (Py_ssize_t p = 0; p < count; p++) {
        PyObject *number = PyLong_FromSsize_t(claimed[p]);
        if (!number)
            goto done;
        PyList_SET_ITEM(counts, p, number);
    }
    non_empty = PyBytes_FromStringAndSize(flags, lines_in_block);
    if (non_empty)
        result = Py_BuildValue("(OOnOO)", indexes, lines, lines_in_block, counts, non_empty);
done:
    for (Py_ssize_t p = 0; read && p < count; p++) {
        PyMem_Free(read[p].anchor);
        PyMem_Free(read[p].anchor_len);
    }
    PyMem_Free(read);
    PyMem_Free(claimed);
    PyMem_Free(flags);
    PyMem_Free(kept);
    Py_XDECREF(indexes);
    Py_XDECREF(lines);
    Py_XDECREF(counts);
    Py_XDECREF(non_empty);
    PyBuffer_Release(&block);
    return result;
}

PyDoc_STRVAR(digit_forms_doc,
"digit_forms(lines) -> list[bytes] | None\n\n"
"Each line's digit form: its bytes with every ASCII digit read as 0. `lines` is a list of bytes or of str;\n"
"None when a str is not ASCII (its form is then not its bytes). Lines of one form get the same bytes object.\n"
"scan.digit_forms does the same in Python.");

/* A byte of a digit form: every ASCII digit read as 0. */
static inline unsigned char zeroed(unsigned char c) {
    return (unsigned char)(c - '0') < 10 ? '0' : c;
}

/* Slots for a hash table of `count` entries, at most half full. */
static Py_ssize_t table_size(Py_ssize_t count) {
    Py_ssize_t slots = 16;
    while (slots < 2 * count)
        slots *= 2;
    return slots;
}

/* A form met earlier in the call: its bytes object and a hash of its bytes. */
typedef struct {
    uint64_t hash;
    PyObject *form;             /* borrowed: the list of forms holds it */
} Met;

/* A quick hash of a form's bytes, eight at a time: equal forms are told apart from the rest by comparing them,
 * so a collision costs a compare, never a wrong answer. */
static uint64_t form_hash(const unsigned char *bytes, Py_ssize_t len) {
    uint64_t hash = 0x9E3779B97F4A7C15ULL ^ (uint64_t)len, word;
    Py_ssize_t i = 0;
    for (; i + 8 <= len; i += 8) {
        memcpy(&word, bytes + i, 8);
        hash = (hash ^ word) * 0x100000001B3ULL;
        hash ^= hash >> 29;
    }
    word = 0;
    memcpy(&word, bytes + i, (size_t)(len - i));
    hash = (hash ^ word) * 0x100000001B3ULL;
    return hash ^ (hash >> 29);
}

/* A line's bytes and their length; -1 for text that is not ASCII, -2 with an error set. */
static Py_ssize_t line_bytes(PyObject *line, const unsigned char **data) {
    if (PyBytes_Check(line)) {
        *data = (const unsigned char *)PyBytes_AS_STRING(line);
        return PyBytes_GET_SIZE(line);
    }
    if (PyUnicode_Check(line)) {
        if (PyUnicode_READY(line) < 0)
            return -2;
        if (!PyUnicode_IS_ASCII(line))
            return -1;
        *data = PyUnicode_1BYTE_DATA(line);
        return PyUnicode_GET_LENGTH(line);
    }
    PyErr_SetString(PyExc_TypeError, "digit_forms takes a list of bytes or str");
    return -2;
}

/* Lines of one form share its bytes object: a dict then finds the form by identity, with its hash computed
 * once, where a new object for every line was hashed and compared byte by byte each time it was looked up. */
static PyObject *digit_forms(PyObject *Py_UNUSED(module), PyObject *lines) {
    if (!PyList_Check(lines)) {
        PyErr_SetString(PyExc_TypeError, "digit_forms takes a list of bytes or str");
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(lines), slots = table_size(count), room = 0;
    PyObject *forms = PyList_New(count), *result = NULL;
    Met *met = PyMem_Calloc((size_t)slots, sizeof(Met));
    unsigned char *scratch = NULL;
    if (!forms || !met) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *data = NULL;
        Py_ssize_t len = line_bytes(PyList_GET_ITEM(lines, i), &data);
        if (len == -1) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        if (len < 0)
            goto done;
        if (len > room) {
            unsigned char *more = PyMem_Realloc(scratch, (size_t)len);
            if (!more) {
                PyErr_NoMemory();
                goto done;
            }
            scratch = more;
            room = len;
        }
        for (Py_ssize_t k = 0; k < len; k++)
            scratch[k] = zeroed(data[k]);
        uint64_t hash = form_hash(scratch, len);
        Py_ssize_t slot = (Py_ssize_t)(hash & (uint64_t)(slots - 1));
        PyObject *form = NULL;
        for (; met[slot].form; slot = (slot + 1) & (slots - 1)) {
            PyObject *seen = met[slot].form;
            if (met[slot].hash == hash && PyBytes_GET_SIZE(seen) == len
                    && memcmp(PyBytes_AS_STRING(seen), scratch, (size_t)len) == 0) {
                form = seen;
                Py_INCREF(form);
                break;
            }
        }
        if (!form) {
            form = PyBytes_FromStringAndSize((const char *)scratch, len);
            if (!form)
                goto done;
            met[slot] = (Met){hash, form};
        }
        PyList_SET_ITEM(forms, i, form);
    }
    result = forms;
    forms = NULL;
done:
    Py_XDECREF(forms);
    PyMem_Free(met);
    PyMem_Free(scratch);
    return result;
}

/* --- quiet lines (scan.QuietLines.mask) ------------------------------------------------------------------------ */

#define NOT_PREFIXED 0
#define PREFIXED_NOT_QUIET 1
#define ASKED 2

/* One digit form met among a block's lines: the first line of that form, and what was found of it. */
typedef struct {
    Py_ssize_t line;            /* the first line of the form, by its place in `lines` */
    uint64_t hash;
    int state;                  /* NOT_PREFIXED, PREFIXED_NOT_QUIET or ASKED */
    Py_ssize_t end;             /* ASKED: where its prefix ends, its message starts */
    int holds;                  /* ASKED: a stop occurs in its message */
} Form;

/* A form of a line's start (up to its first ']' and two bytes more): where the prefix ends, -1 where it fails. */
typedef struct {
    uint64_t hash;
    Py_ssize_t line, len;       /* the line it was first met in, and the length of the start */
    Py_ssize_t end;
    int used;
} Start;

/* Where the form of line i (`len` bytes at `form` in the arena of forms, hashed) first appeared among `forms`,
 * added when new. `slot_of` maps a hash table of `slots` slots to places in `forms` (+1; 0: empty). */
static Py_ssize_t form_of(Py_ssize_t i, const unsigned char *arena, const Py_ssize_t *offset, Py_ssize_t len,
                          uint64_t hash, Py_ssize_t *slot_of, Py_ssize_t slots, Form *forms, Py_ssize_t *count) {
    Py_ssize_t slot = (Py_ssize_t)(hash & (uint64_t)(slots - 1));
    for (; slot_of[slot]; slot = (slot + 1) & (slots - 1)) {
        const Form *seen = &forms[slot_of[slot] - 1];
        if (seen->hash == hash && offset[seen->line + 1] - offset[seen->line] == len
                && memcmp(arena + offset[seen->line], arena + offset[i], (size_t)len) == 0)
            return slot_of[slot] - 1;
    }
    forms[*count] = (Form){i, hash, NOT_PREFIXED, 0, 0};
    slot_of[slot] = ++*count;
    return *count - 1;
}

/* Where the prefix ends in line `at` (through `prefix_end`), asked once per form of the line's first `len` bytes
 * (a table of `slots` slots); -2 with an error set. */
static Py_ssize_t prefix_end_of(PyObject *lines, Py_ssize_t at, Py_ssize_t len, const unsigned char *arena,
                                const Py_ssize_t *offset, Start *starts, Py_ssize_t slots, PyObject *prefix_end) {
    const unsigned char *form = arena + offset[at];
    uint64_t hash = form_hash(form, len);
    Py_ssize_t slot = (Py_ssize_t)(hash & (uint64_t)(slots - 1));
    for (; starts[slot].used; slot = (slot + 1) & (slots - 1)) {
        const Start *seen = &starts[slot];
        if (seen->hash == hash && seen->len == len && memcmp(arena + offset[seen->line], form, (size_t)len) == 0)
            return seen->end;
    }
    PyObject *got = PyObject_CallOneArg(prefix_end, PyList_GET_ITEM(lines, at));
    if (!got)
        return -2;
    Py_ssize_t end = PyLong_AsSsize_t(got);
    Py_DECREF(got);
    if (end == -1 && PyErr_Occurred())
        return -2;
    starts[slot] = (Start){hash, at, len, end < 0 ? -1 : end, 1};
    return end < 0 ? -1 : end;
}

PyDoc_STRVAR(quiet_mask_doc,
"quiet_mask(lines, indexes, non_empty, prefix_end, max_bytes, digit_stops, find_stops) -> bytes\n\n"
"scan.QuietLines.mask, compiled: one byte per line of `lines` (bytes, the block's lines at `indexes` that no bulk\n"
"pattern claimed; `non_empty` one byte per line of the block), 1 where the line is quiet. Lines are asked once per\n"
"digit form (each on its own where a form holds one of `digit_stops`); `prefix_end(line)` is where the quiet prefix\n"
"ends or -1, asked once per form of a line's start up to its first ']' and two bytes more; a line longer than\n"
"`max_bytes` is not quiet; `find_stops(joined)` gives (stop, start, end) for each stop in the messages after\n"
"the prefix, joined by newlines.");

static PyObject *quiet_mask(PyObject *Py_UNUSED(module), PyObject *args) {
    PyObject *lines, *indexes, *prefix_end, *digit_stops, *find_stops;
    Py_buffer non_empty;
    Py_ssize_t max_bytes;
    if (!PyArg_ParseTuple(args, "O!O!y*OnO!O:quiet_mask", &PyList_Type, &lines, &PyList_Type, &indexes, &non_empty,
                          &prefix_end, &max_bytes, &PyTuple_Type, &digit_stops, &find_stops))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(lines), form_count = 0, messages = 0, joined_len = 0;
    Py_ssize_t slots = table_size(count);
    PyObject *result = NULL, *joined = NULL, *found = NULL, *iterator = NULL;
    Py_ssize_t *form_at = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t));     /* each line's form */
    Py_ssize_t *slot_of = PyMem_Calloc((size_t)slots, sizeof(Py_ssize_t));
    Form *forms = PyMem_Calloc((size_t)count + 1, sizeof(Form));
    Start *starts = NULL;           /* sized once the forms are counted */
    Py_ssize_t start_slots = 0;
    Py_ssize_t *message_at = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t)); /* where each message starts */
    Py_ssize_t *offset = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t));    /* where each form is in the arena */
    Py_ssize_t *stop_pick = NULL;
    unsigned char *prefixed = PyMem_Calloc((size_t)count + 1, 1), *arena = NULL;
    unsigned char *plain = PyMem_Malloc((size_t)non_empty.len + 1);
    if (!form_at || !slot_of || !forms || !message_at || !offset || !prefixed || !plain) {
        PyErr_NoMemory();
        goto done;
    }
    if (PyList_GET_SIZE(indexes) != count) {
        PyErr_SetString(PyExc_ValueError, "quiet_mask takes as many indexes as lines");
        goto done;
    }
    Py_ssize_t stop_count = PyTuple_GET_SIZE(digit_stops);
    stop_pick = PyMem_Calloc((size_t)stop_count + 1, sizeof(Py_ssize_t));
    if (!stop_pick) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t s = 0; s < stop_count; s++) {
        PyObject *stop = PyTuple_GET_ITEM(digit_stops, s);
        if (!PyBytes_Check(stop) || PyBytes_GET_SIZE(stop) == 0) {
            PyErr_SetString(PyExc_TypeError, "a digit stop is non-empty bytes");
            goto done;
        }
        stop_pick[s] = rarest(PyBytes_AS_STRING(stop), PyBytes_GET_SIZE(stop));
    }
    /* Each line's digit form, in one arena, the forms met kept once. A form holding a stop with digits whose other
     * forms are not stops too: every line is asked on its own. */
    offset[0] = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *line = PyList_GET_ITEM(lines, i);
        if (!PyBytes_Check(line)) {
            PyErr_SetString(PyExc_TypeError, "quiet_mask takes a list of bytes");
            goto done;
        }
        offset[i + 1] = offset[i] + PyBytes_GET_SIZE(line);
    }
    arena = PyMem_Malloc((size_t)offset[count] + 1);
    if (!arena) {
        PyErr_NoMemory();
        goto done;
    }
    int alone = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(PyList_GET_ITEM(lines, i));
        unsigned char *form = arena + offset[i];
        Py_ssize_t len = offset[i + 1] - offset[i], known = form_count;
        for (Py_ssize_t k = 0; k < len; k++)
            form[k] = zeroed(data[k]);
        form_at[i] = form_of(i, arena, offset, len, form_hash(form, len), slot_of, slots, forms, &form_count);
        for (Py_ssize_t s = 0; form_count > known && !alone && s < stop_count; s++) {
            PyObject *stop = PyTuple_GET_ITEM(digit_stops, s);
            alone = find_at((const char *)form, len, PyBytes_AS_STRING(stop), PyBytes_GET_SIZE(stop),
                            stop_pick[s]) != NULL;
        }
    }
    if (alone) {
        for (Py_ssize_t i = 0; i < count; i++) {
            forms[i] = (Form){i, 0, NOT_PREFIXED, 0, 0};
            form_at[i] = i;
        }
        form_count = count;
    }
    /* Each form's prefix, its length, and its message after the prefix. */
    start_slots = table_size(form_count);
    starts = PyMem_Calloc((size_t)start_slots, sizeof(Start));
    if (!starts) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t f = 0; f < form_count; f++) {
        PyObject *line = PyList_GET_ITEM(lines, forms[f].line);
        const char *data = PyBytes_AS_STRING(line);
        Py_ssize_t len = PyBytes_GET_SIZE(line);
        const char *close = memchr(data, ']', (size_t)len);
        if (!close)
            continue;           /* NOT_PREFIXED */
        Py_ssize_t start_len = close - data + 3 < len ? close - data + 3 : len;
        Py_ssize_t end = prefix_end_of(lines, forms[f].line, start_len, arena, offset, starts, start_slots,
                                       prefix_end);
        if (end == -2)
            goto done;
        if (end < 0)
            continue;
        if (len > max_bytes) {
            forms[f].state = PREFIXED_NOT_QUIET;
            continue;
        }
        forms[f].state = ASKED;
        forms[f].end = end < len ? end : len;
        message_at[messages++] = joined_len;
        joined_len += len - forms[f].end + 1;      /* and a newline */
    }
    /* The stops in the messages, all in one search. */
    if (messages) {
        joined = PyBytes_FromStringAndSize(NULL, joined_len - 1);
        if (!joined)
            goto done;
        char *out = PyBytes_AS_STRING(joined);
        for (Py_ssize_t f = 0, m = 0; f < form_count; f++) {
            if (forms[f].state != ASKED)
                continue;
            PyObject *line = PyList_GET_ITEM(lines, forms[f].line);
            Py_ssize_t size = PyBytes_GET_SIZE(line) - forms[f].end;
            memcpy(out + message_at[m], PyBytes_AS_STRING(line) + forms[f].end, (size_t)size);
            if (++m < messages)
                out[message_at[m] - 1] = '\n';
        }
        found = PyObject_CallOneArg(find_stops, joined);
        if (!found || !(iterator = PyObject_GetIter(found)))
            goto done;
        Form **asked = PyMem_Calloc((size_t)messages, sizeof(Form *));
        if (!asked) {
            PyErr_NoMemory();
            goto done;
        }
        for (Py_ssize_t f = 0, m = 0; f < form_count; f++)
            if (forms[f].state == ASKED)
                asked[m++] = &forms[f];
        PyObject *match;
        while ((match = PyIter_Next(iterator))) {
            PyObject *where = PySequence_Check(match) ? PySequence_GetItem(match, 1) : NULL;
            Py_DECREF(match);
            Py_ssize_t at = where ? PyLong_AsSsize_t(where) : -1;
            Py_XDECREF(where);
            if (at < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_ValueError, "find_stops gives (stop, start, end) in the joined messages");
                PyMem_Free(asked);
                goto done;
            }
            Py_ssize_t low = 0, high = messages;      /* the last message starting at or before `at` */
            while (high - low > 1) {
                Py_ssize_t mid = (low + high) / 2;
                if (message_at[mid] <= at)
                    low = mid;
                else
                    high = mid;
            }
            asked[low]->holds = 1;
        }
        PyMem_Free(asked);
        if (PyErr_Occurred())
            goto done;
    }
    /* A quiet line's neighbours in the block are plain too (the prefix, or a bulk line set aside), and so is the
     * line received before it. */
    memcpy(plain, non_empty.buf, (size_t)non_empty.len);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyList_GET_ITEM(indexes, i));
        if (index < 0 || index >= non_empty.len) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "an index is outside the block");
            goto done;
        }
        prefixed[i] = forms[form_at[i]].state != NOT_PREFIXED;
        if (!prefixed[i])
            plain[index] = 0;
    }
    result = PyBytes_FromStringAndSize(NULL, count);
    if (!result)
        goto done;
    unsigned char *quiet = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < count; i++) {
        Py_ssize_t index = PyLong_AsSsize_t(PyList_GET_ITEM(indexes, i));
        const Form *form = &forms[form_at[i]];
        quiet[i] = form->state == ASKED && !form->holds && i > 0 && prefixed[i - 1] && index > 0 && plain[index - 1]
                   && index + 1 < non_empty.len && plain[index + 1];
    }
done:
    PyMem_Free(form_at);
    PyMem_Free(slot_of);
    PyMem_Free(forms);
    PyMem_Free(starts);
    PyMem_Free(message_at);
    PyMem_Free(prefixed);
    PyMem_Free(plain);
    PyMem_Free(offset);
    PyMem_Free(arena);
    PyMem_Free(stop_pick);
    Py_XDECREF(joined);
    Py_XDECREF(found);
    Py_XDECREF(iterator);
    PyBuffer_Release(&non_empty);
    return result;
}

static PyMethodDef methods[] = {
    {"split_bulk", split_bulk, METH_VARARGS, split_bulk_doc},
    {"digit_forms", digit_forms, METH_O, digit_forms_doc},
    {"quiet_mask", quiet_mask, METH_VARARGS, quiet_mask_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bulkscan",
    "The bulk split, the digit forms and the quiet lines of triage.sources.scan, compiled (scan.py has them in "
    "Python).", -1, methods,
};

PyMODINIT_FUNC PyInit__bulkscan(void) {
    return PyModule_Create(&module);
}
