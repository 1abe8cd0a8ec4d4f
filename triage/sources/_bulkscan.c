/* The bulk split of scan.split_block, compiled: the lines no bulk pattern claims, without an object per line.
 *
 * A busy server's log is 99 % request and access lines. In Python every line of a block becomes a bytes object
 * (bytes.split) before a regex searches its head, and that is most of the cost of a 1 GiB log. Here the block is
 * walked once: memchr finds each line's end, memmem looks for each pattern's shared piece and then its anchors in
 * the line's first `window` bytes, and only the lines left for the parser become objects. scan.py keeps the same
 * split in Python for a machine where this did not build; tests/test_properties.py holds the two to the same
 * answer on drawn blocks.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE             /* memmem */
#endif
#include <Python.h>
#include <string.h>

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
        it->in_block = it->needle_len == 0 || memmem(block, (size_t)size, it->needle, (size_t)it->needle_len) != NULL;
    }
    return 0;
}

/* Append the line's index and its bytes to the two columns. */
static int keep(PyObject *indexes, PyObject *lines, Py_ssize_t index, const char *line, Py_ssize_t len) {
    PyObject *number = PyLong_FromSsize_t(index);
    PyObject *text = number ? PyBytes_FromStringAndSize(line, len) : NULL;
    int failed = !text || PyList_Append(indexes, number) < 0 || PyList_Append(lines, text) < 0;
    Py_XDECREF(number);
    Py_XDECREF(text);
    return failed ? -1 : 0;
}

PyDoc_STRVAR(split_bulk_doc,
"split_bulk(block, patterns, window) -> (indexes, lines, line_count, counts, non_empty)\n\n"
"The lines of `block` (split at b'\\n'; a last newline ends the last line) no pattern claims: each pattern is a\n"
"tuple (needle, anchor, ...) and claims a line when one of its anchors occurs in the line's first `window`\n"
"bytes (the needle is a piece of text every anchor holds, b'' for none). A line counts for the first pattern\n"
"that claims it; empty lines are neither claimed nor kept. `indexes` are the kept lines' places in the block\n"
"(from 0), `counts` the lines each pattern claimed, `non_empty` one byte per line, 1 where it is not empty.");

static PyObject *split_bulk(PyObject *self, PyObject *args) {
    Py_buffer block;
    PyObject *patterns;
    Py_ssize_t window;
    if (!PyArg_ParseTuple(args, "y*O!n:split_bulk", &block, &PyTuple_Type, &patterns, &window))
        return NULL;
    const char *data = block.buf;
    Py_ssize_t size = block.len, count = PyTuple_GET_SIZE(patterns), lines_in_block = 0;
    PyObject *indexes = PyList_New(0), *kept = PyList_New(0), *counts = NULL, *non_empty = NULL, *result = NULL;
    Py_ssize_t *claimed = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t));
    Pattern *read = PyMem_Calloc((size_t)count + 1, sizeof(Pattern));
    char *flags = NULL;
    if (!indexes || !kept || !claimed || !read) {
        if (!PyErr_Occurred())
            PyErr_NoMemory();
        goto done;
    }
    if (window < 0) {
        PyErr_SetString(PyExc_ValueError, "window must not be negative");
        goto done;
    }
    if (read_patterns(patterns, read, count, data, size) < 0)
        goto done;
    /* One byte per line at most: a line is at least its newline, but the last may lack it. */
    flags = PyMem_Malloc((size_t)size + 1);
    if (!flags) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t at = 0; at < size; lines_in_block++) {
        const char *line = data + at;
        const char *end = memchr(line, '\n', (size_t)(size - at));
        Py_ssize_t len = end ? end - line : size - at;
        flags[lines_in_block] = len > 0;
        at += len + 1;
        if (!len)
            continue;
        Py_ssize_t head = len < window ? len : window, p = 0;
        while (p < count && !claims(&read[p], line, head))
            p++;
        if (p < count)
            claimed[p]++;
        else if (keep(indexes, kept, lines_in_block, line, len) < 0)
            goto done;
    }
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
        result = Py_BuildValue("(OOnOO)", indexes, kept, lines_in_block, counts, non_empty);
done:
    for (Py_ssize_t p = 0; read && p < count; p++) {
        PyMem_Free(read[p].anchor);
        PyMem_Free(read[p].anchor_len);
    }
    PyMem_Free(read);
    PyMem_Free(claimed);
    PyMem_Free(flags);
    Py_XDECREF(indexes);
    Py_XDECREF(kept);
    Py_XDECREF(counts);
    Py_XDECREF(non_empty);
    PyBuffer_Release(&block);
    return result;
}

static PyMethodDef methods[] = {
    {"split_bulk", split_bulk, METH_VARARGS, split_bulk_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_bulkscan",
    "The bulk split of triage.sources.scan, compiled (scan.py has the same split in Python).", -1, methods,
};

PyMODINIT_FUNC PyInit__bulkscan(void) {
    return PyModule_Create(&module);
}
