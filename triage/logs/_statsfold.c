/* The figures of a run of stats lines (statsrun._Run.done), compiled: each line's summed fields read straight from
 * its text by the spans its template gives, with no object per field.
 *
 * A stats log's cost is mostly the fold's, and half of that was cutting each line's figures out as strings, looking
 * each up in its converter's answers and reducing the columns. Here the run's lines are walked once: each field's
 * digits are converted in place (ints exactly, floats and percents to the double float() gives), and the peaks,
 * the KV usage's sum and the saturated intervals counted. Anything this does not read exactly as the converters
 * would (a text that is not ASCII, too long for the short converters, or holding a character the shapes' groups do
 * not hold) makes it answer None, and statsrun reads that run in Python; tests/test_properties.py holds the two to
 * the same answer on drawn runs.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The longest texts the short converters take (signatures._short_int, _short_float, _short_percent). */
#define LONGEST_NUMBER 15
#define LONGEST_PERCENT 7

typedef struct {
    int present;
    int64_t whole;      /* kind 'i' */
    double real;        /* kinds 'f' and 'p' */
} Cell;

/* One field's text as its kind converts it. 1: read into `cell` (present or not: a text that does not convert is
 * absent, as the converters answer None); 0: not read here (the run goes to Python). */
static int read_cell(const char *text, Py_ssize_t len, char kind, Cell *cell) {
    cell->present = 0;
    if (len == 0)
        return 1;
    if (kind == 'i') {
        if (len > LONGEST_NUMBER)
            return 0;
        int64_t value = 0;
        for (Py_ssize_t k = 0; k < len; k++) {
            unsigned char digit = (unsigned char)(text[k] - '0');
            if (digit > 9)
                return 0;
            value = value * 10 + digit;
        }
        cell->present = 1;
        cell->whole = value;
        return 1;
    }
    Py_ssize_t end = len;
    if (kind == 'p') {
        if (len > LONGEST_PERCENT)
            return 0;
        while (end > 0 && text[end - 1] == '%')         /* raw.rstrip("%") */
            end--;
    } else if (kind != 'f' || len > LONGEST_NUMBER) {
        return 0;
    }
    if (end > LONGEST_NUMBER)
        return 0;
    /* At most 15 digits: the whole number they make is exact in a double, as is the power of ten, and one
     * division rounds correctly: the value float() gives (CPython's strtod takes the same fast path). */
    static const double tens[LONGEST_NUMBER + 1] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                                    1e12, 1e13, 1e14, 1e15};
    int64_t whole = 0;
    int digits = 0, places = 0, dots = 0;
    for (Py_ssize_t k = 0; k < end; k++) {
        char c = text[k];
        if (c == '.') {
            dots++;
            continue;
        }
        unsigned char digit = (unsigned char)(c - '0');
        if (digit > 9)
            return 0;
        whole = whole * 10 + digit;
        digits++;
        places += dots;
    }
    if (digits == 0 || dots > 1)
        return 1;                                       /* "", ".", "1.2.3": float() fails, the value is absent */
    double value = (double)whole / tens[places];
    cell->present = 1;
    cell->real = kind == 'p' ? value / 100.0 : value;
    return 1;
}

static PyObject *cell_object(const Cell *cell, char kind) {
    if (!cell->present)
        Py_RETURN_NONE;
    return kind == 'i' ? PyLong_FromLongLong(cell->whole) : PyFloat_FromDouble(cell->real);
}

/* Whether `a` is above `b` (both present, of one kind). */
static int above(const Cell *a, const Cell *b, char kind) {
    return kind == 'i' ? a->whole > b->whole : a->real > b->real;
}

static int nonzero(const Cell *cell, char kind) {
    return cell->present && (kind == 'i' ? cell->whole != 0 : cell->real != 0.0);
}

/* texts[i][start:end] as the kind and the bytes of its characters, the span checked; NULL where it is outside. */
static const char *slice_at(PyObject *text, const char *cut, Py_ssize_t j, Py_ssize_t *len) {
    int32_t span[2];
    memcpy(span, cut + 8 * j, sizeof span);
    if (span[0] == -1 && span[1] == -1) {
        *len = 0;
        return "";
    }
    if (span[0] < 0 || span[1] < span[0] || span[1] > PyUnicode_GET_LENGTH(text))
        return NULL;
    int kind = PyUnicode_KIND(text);
    *len = (Py_ssize_t)(span[1] - span[0]) * kind;
    return (const char *)PyUnicode_DATA(text) + (Py_ssize_t)span[0] * kind;
}

PyDoc_STRVAR(figures_doc,
"figures(texts, cuts, kinds, kv, waiting, swapped, saturated) -> tuple | None\n\n"
"The figures of a run of stats lines: `cuts[i]` holds the start and end of each summed field in texts[i], as\n"
"native 32-bit ints (array('i').tobytes()), -1 and -1 for a group that took no part (the slice is \"\");\n"
"`kinds` a byte per field ('i', 'f', 'p': signatures._short_int, _short_float, _short_percent); kv, waiting,\n"
"swapped the fields' places (-1 where the shape lacks one). Returns (tops, sums, kv_sum, best, saturated,\n"
"saturated_queue): each field's largest value (the first of equals) and its sum in line order (None for both\n"
"where no line has one), the sum of the KV usage (0.0 where a line lacks it), the last line of the fullest KV\n"
"cache, and the lines at or above `saturated` usage, and those with requests waiting or swapped too (0 and 0\n"
"where no line reaches it). None where a line is not read as the converters read it.");

static PyObject *figures(PyObject *self, PyObject *args) {
    PyObject *texts, *cuts;
    const char *kinds;
    Py_ssize_t width, kv, waiting, swapped;
    double saturated_at;
    if (!PyArg_ParseTuple(args, "O!O!y#nnnd", &PyList_Type, &texts, &PyList_Type, &cuts, &kinds, &width, &kv,
                          &waiting, &swapped, &saturated_at))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(cuts) != count || count == 0 || kv >= width || waiting >= width || swapped >= width) {
        PyErr_SetString(PyExc_ValueError, "figures: a cut per text, one text at least, the fields' places in range");
        return NULL;
    }
    Cell *cells = PyMem_Calloc((size_t)(count * width), sizeof(Cell));
    if (!cells)
        return PyErr_NoMemory();
    PyObject *result = NULL, *tops = NULL, *sums = NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i), *cut = PyList_GET_ITEM(cuts, i);
        if (!PyUnicode_Check(text) || !PyBytes_Check(cut) || PyBytes_GET_SIZE(cut) != 2 * width * 4) {
            PyErr_SetString(PyExc_TypeError, "figures: each text a str, each cut two 32-bit ints per field (bytes)");
            goto done;
        }
        if (!PyUnicode_IS_ASCII(text)) {
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        for (Py_ssize_t j = 0; j < width; j++) {
            Py_ssize_t len = 0;
            const char *field = slice_at(text, PyBytes_AS_STRING(cut), j, &len);     /* ASCII: a byte a character */
            if (!field) {
                PyErr_SetString(PyExc_ValueError, "figures: a cut outside its text");
                goto done;
            }
            if (!read_cell(field, len, kinds[j], &cells[i * width + j])) {
                result = Py_None;
                Py_INCREF(result);
                goto done;
            }
        }
    }
    tops = PyTuple_New(width);
    sums = PyTuple_New(width);
    if (!tops || !sums)
        goto done;
    for (Py_ssize_t j = 0; j < width; j++) {
        char kind = kinds[j];
        const Cell *top = NULL;
        int64_t sum = 0;
        double real_sum = 0.0;                            /* in line order, as sum() adds floats */
        int summed = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            const Cell *cell = &cells[i * width + j];
            if (!cell->present)
                continue;
            if (!top || above(cell, top, kind))
                top = cell;                               /* max(): the first of equal values */
            if (kind == 'i' && __builtin_add_overflow(sum, cell->whole, &sum)) {
                result = Py_None;                         /* far past any real count: Python sums it */
                Py_INCREF(result);
                goto done;
            }
            if (kind != 'i')
                real_sum += cell->real;
            summed = 1;
        }
        PyObject *top_value = top ? cell_object(top, kind) : (Py_INCREF(Py_None), Py_None);
        PyObject *sum_value = !summed ? (Py_INCREF(Py_None), Py_None)
                              : kind == 'i' ? PyLong_FromLongLong(sum) : PyFloat_FromDouble(real_sum);
        if (!top_value || !sum_value) {
            Py_XDECREF(top_value);
            Py_XDECREF(sum_value);
            goto done;
        }
        PyTuple_SET_ITEM(tops, j, top_value);
        PyTuple_SET_ITEM(sums, j, sum_value);
    }
    /* The KV usage, 0.0 where a line lacks it (or the shape does): its sum in line order, as sum() adds floats. */
    double kv_sum = 0.0, fullest = 0.0;
    Py_ssize_t best = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        double usage = kv >= 0 && cells[i * width + kv].present ? cells[i * width + kv].real : 0.0;
        kv_sum += usage;
        if (i == 0 || usage > fullest)
            fullest = usage;
    }
    long full = 0, full_and_queued = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        double usage = kv >= 0 && cells[i * width + kv].present ? cells[i * width + kv].real : 0.0;
        if (usage == fullest)
            best = i;                                     /* the last line of the fullest cache */
        if (fullest >= saturated_at && usage >= saturated_at) {
            full++;
            if ((waiting >= 0 && nonzero(&cells[i * width + waiting], kinds[waiting]))
                    || (swapped >= 0 && nonzero(&cells[i * width + swapped], kinds[swapped])))
                full_and_queued++;
        }
    }
    result = Py_BuildValue("(OOdnll)", tops, sums, kv_sum, best, full, full_and_queued);
done:
    Py_XDECREF(tops);
    Py_XDECREF(sums);
    PyMem_Free(cells);
    return result;
}

PyDoc_STRVAR(alike_doc,
"alike(texts, cuts) -> bool\n\n"
"Whether every text's slices (`cuts[i]`: start and end of each, native 32-bit ints, a span of -1 and -1 for an\n"
"empty slice) read as the first text's: the lines of a stats batch then share one process name, pid and file.\n"
"False also where it cannot tell cheaply (texts of different widths of character).");

static PyObject *alike(PyObject *self, PyObject *args) {
    PyObject *texts, *cuts;
    if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &texts, &PyList_Type, &cuts))
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(texts);
    if (PyList_GET_SIZE(cuts) != count) {
        PyErr_SetString(PyExc_ValueError, "alike: a cut per text");
        return NULL;
    }
    if (count == 0)
        Py_RETURN_TRUE;
    PyObject *first = PyList_GET_ITEM(texts, 0), *first_cut = PyList_GET_ITEM(cuts, 0);
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *text = PyList_GET_ITEM(texts, i), *cut = PyList_GET_ITEM(cuts, i);
        if (!PyUnicode_Check(text) || !PyBytes_Check(cut) || PyBytes_GET_SIZE(cut) != PyBytes_GET_SIZE(first_cut)
                || PyBytes_GET_SIZE(cut) % 8) {
            PyErr_SetString(PyExc_TypeError, "alike: each text a str, each cut the same number of spans (bytes)");
            return NULL;
        }
        if (PyUnicode_KIND(text) != PyUnicode_KIND(first))
            Py_RETURN_FALSE;
        for (Py_ssize_t j = 0; j < PyBytes_GET_SIZE(cut) / 8; j++) {
            Py_ssize_t len = 0, first_len = 0;
            const char *here = slice_at(text, PyBytes_AS_STRING(cut), j, &len);
            const char *there = slice_at(first, PyBytes_AS_STRING(first_cut), j, &first_len);
            if (!here || !there) {
                PyErr_SetString(PyExc_ValueError, "alike: a cut outside its text");
                return NULL;
            }
            if (len != first_len || memcmp(here, there, (size_t)len) != 0)
                Py_RETURN_FALSE;
        }
    }
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"figures", figures, METH_VARARGS, figures_doc},
    {"alike", alike, METH_VARARGS, alike_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_statsfold",
    "The figures of a run of stats lines and whether a batch's lines share a process, compiled (statsrun.py has both "
    "in Python).", -1, methods,
};

PyMODINIT_FUNC PyInit__statsfold(void) {
    return PyModule_Create(&module);
}
