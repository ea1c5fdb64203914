/* Runs of text events read in compiled code (stream_readers._TextTemplate.read_run).
 *
 * A translated stream is mostly text events that differ from each other only in their text
 * (and a provider's per-event string and number). Read in Python, one such event cost 1.2-2
 * microseconds of searches, slices and checks: more than the caller's own pass-through spent on
 * it. Here a run is scanned, checked and cut into its texts in one call. No library reads SSE
 * events against a learnt template; UTF-8 is checked by CPython's own decoder.
 *
 * A RunReader is made once a template is learnt, from the template's values in order: each is
 * (following, spec), where following is the payload's bytes after the value up to the next
 * value (or the payload's end), and spec is None for the text (a JSON string, taken with its
 * quotes) or, for values that are not the text, what they must be: a tuple of kinds (FREE, a
 * plain string's content; NUMBER, an integer as JSON writes it) with the literal bytes between
 * them, as (kind, literal, kind, ...).
 *
 * RunReader.read(data, prefix) reads the events at data's start that begin with prefix (the
 * event line, "data: " and the payload up to the first value) and end as the template does,
 * and returns (texts, events, used, escaped): the texts that are not empty, as bytes (JSON
 * string literals), the events read, the bytes they take, and whether a text holds an escape or
 * a quote of its own (written otherwise than orjson writes it, or not a string: the caller
 * checks those). None when the run reads nothing: no whole event, only empty texts, or a value
 * that is not what the template says (a control character, bad UTF-8, a non-plain free string,
 * a malformed integer); the caller then reads event by event.
 */
#define PY_SSIZE_T_CLEAN
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <Python.h>
#include <string.h>

#ifndef SOURCE_SHA256 /* setup.py defines it: the digest of this file */
#define SOURCE_SHA256 ""
#endif
#define KIND_FREE 1
#define KIND_NUMBER 2
#define MAX_VALUES 8
#define MAX_PARTS 15
/* Bytes after a value longer than this are found by their first byte, then compared: a long
 * needle costs more to search for than one byte and a comparison. */
#define LONG_NEEDLE 32

typedef struct {
    PyObject *following; /* bytes */
    PyObject *needle;    /* bytes: what is searched for to find the value's end */
    Py_ssize_t skip;     /* from the value's end to the next value's start */
    int is_text;
    int parts; /* kinds at even places, literals (bytes) at odd places */
    int kinds[MAX_PARTS];
    PyObject *literals[MAX_PARTS];
} Value;

typedef struct {
    PyObject_HEAD
    int count;
    Value values[MAX_VALUES];
} RunReader;

static void
RunReader_dealloc(RunReader *self)
{
    for (int i = 0; i < self->count; i++) {
        Value *value = &self->values[i];
        Py_XDECREF(value->following);
        Py_XDECREF(value->needle);
        for (int part = 1; part < value->parts; part += 2) {
            Py_XDECREF(value->literals[part]);
        }
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
take_spec(Value *value, PyObject *spec)
{
    if (spec == Py_None) {
        value->is_text = 1;
        return 0;
    }
    Py_ssize_t parts = PyTuple_Check(spec) ? PyTuple_GET_SIZE(spec) : 0;
    if (parts < 1 || parts > MAX_PARTS || parts % 2 == 0) {
        PyErr_SetString(PyExc_ValueError, "a spec is (kind, literal, kind, ...)");
        return -1;
    }
    for (Py_ssize_t part = 0; part < parts; part++) {
        PyObject *item = PyTuple_GET_ITEM(spec, part);
        if (part % 2 == 1) {
            if (!PyBytes_Check(item)) {
                PyErr_SetString(PyExc_TypeError, "a spec's literal is bytes");
                return -1;
            }
            Py_INCREF(item);
            value->literals[part] = item;
            value->parts = (int)part + 1; /* what dealloc releases */
            continue;
        }
        long kind = PyLong_Check(item) ? PyLong_AsLong(item) : -1;
        if (kind != KIND_FREE && kind != KIND_NUMBER) {
            PyErr_SetString(PyExc_ValueError, "a spec's kind is FREE or NUMBER");
            return -1;
        }
        value->kinds[part] = (int)kind;
    }
    value->parts = (int)parts;
    return 0;
}

static int
RunReader_init(RunReader *self, PyObject *args, PyObject *kwds)
{
    PyObject *values;
    if (kwds != NULL && PyDict_GET_SIZE(kwds)) {
        PyErr_SetString(PyExc_TypeError, "RunReader takes its values alone");
        return -1;
    }
    if (self->count) {
        PyErr_SetString(PyExc_TypeError, "a RunReader is made once");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O!:RunReader", &PyTuple_Type, &values)) {
        return -1;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(values);
    if (count < 1 || count > MAX_VALUES) {
        PyErr_Format(PyExc_ValueError, "a template has 1 to %d values", MAX_VALUES);
        return -1;
    }
    int texts = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyTuple_GET_ITEM(values, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBytes_Check(PyTuple_GET_ITEM(item, 0))) {
            PyErr_SetString(PyExc_TypeError, "a value is (following: bytes, spec)");
            return -1;
        }
        PyObject *following = PyTuple_GET_ITEM(item, 0), *spec = PyTuple_GET_ITEM(item, 1);
        Value *value = &self->values[i];
        self->count = (int)i + 1; /* what dealloc releases */
        Py_INCREF(following);
        value->following = following;
        Py_ssize_t size = PyBytes_GET_SIZE(following);
        if (i == count - 1) { /* the last value ends where the event does */
            value->needle = PyBytes_FromStringAndSize(NULL, size + 2);
            if (value->needle != NULL) {
                char *needle = PyBytes_AS_STRING(value->needle);
                memcpy(needle, PyBytes_AS_STRING(following), size);
                memcpy(needle + size, "\n\n", 2);
            }
            value->skip = size + 2;
        }
        else {
            value->needle = size > LONG_NEEDLE ? PyBytes_FromStringAndSize(
                                                     PyBytes_AS_STRING(following), 1)
                                               : Py_NewRef(following);
            value->skip = size;
        }
        if (value->needle == NULL || take_spec(value, spec) < 0) {
            return -1;
        }
        texts += value->is_text;
    }
    if (texts != 1) {
        PyErr_SetString(PyExc_ValueError, "a template has one text");
        return -1;
    }
    return 0;
}

static int
valid_utf8(const char *bytes, Py_ssize_t size)
{
    PyObject *text = PyUnicode_DecodeUTF8(bytes, size, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return 0;
    }
    Py_DECREF(text);
    return 1;
}

/* A value that is not the text is what its spec says, each part whole; a free string stops at
 * its first quote, which a literal after it starts with, and a number is never followed by a
 * digit in JSON: so reading each part as far as it goes reads what a pattern would match. */
static int
value_fits(const Value *value, const unsigned char *at, Py_ssize_t size)
{
    Py_ssize_t pos = 0;
    for (int part = 0; part < value->parts; part++) {
        if (part % 2 == 1) {
            PyObject *literal = value->literals[part];
            Py_ssize_t length = PyBytes_GET_SIZE(literal);
            if (size - pos < length || memcmp(at + pos, PyBytes_AS_STRING(literal), length)) {
                return 0;
            }
            pos += length;
        }
        else if (value->kinds[part] == KIND_FREE) {
            while (pos < size && at[pos] >= 0x20 && at[pos] != '"' && at[pos] != '\\') {
                pos++;
            }
        }
        else if (pos < size && at[pos] == '0') {
            pos++;
        }
        else if (pos < size && at[pos] >= '1' && at[pos] <= '9') {
            while (pos < size && at[pos] >= '0' && at[pos] <= '9') {
                pos++;
            }
        }
        else {
            return 0;
        }
    }
    if (pos != size) {
        return 0;
    }
    for (pos = 0; pos < size; pos++) {
        if (at[pos] >= 0x80) {
            return valid_utf8((const char *)at, size);
        }
    }
    return 1;
}

/* A text (its quotes included) holds no raw control character and is valid UTF-8; *escaped is
 * set when it holds a backslash or a quote of its own. */
static int
text_fits(const unsigned char *at, Py_ssize_t size, int *escaped)
{
    int high = 0, quotes = 0;
    for (Py_ssize_t pos = 0; pos < size; pos++) {
        unsigned char byte = at[pos];
        if (byte < 0x20) {
            return 0;
        }
        high |= byte >= 0x80;
        quotes += byte == '"';
        *escaped |= byte == '\\';
    }
    *escaped |= quotes != 2;
    return !high || valid_utf8((const char *)at, size);
}

static const char *
find(const char *data, Py_ssize_t from, Py_ssize_t size, PyObject *needle)
{
    Py_ssize_t length = PyBytes_GET_SIZE(needle);
    const char *bytes = PyBytes_AS_STRING(needle);
    if (length == 1) {
        return memchr(data + from, bytes[0], size - from);
    }
    return memmem(data + from, size - from, bytes, length);
}

/* Each event's values as (start, end) places, its text's with its quotes. */
static int
read_event(const RunReader *self, const char *data, Py_ssize_t size, Py_ssize_t at,
           Py_ssize_t places[][2], Py_ssize_t *next)
{
    for (int i = 0; i < self->count; i++) {
        const Value *value = &self->values[i];
        const char *hit = find(data, at, size, value->needle);
        if (hit == NULL) {
            return 0; /* the piece ends inside this event */
        }
        Py_ssize_t end = hit - data;
        if (value->needle != value->following && i < self->count - 1) {
            Py_ssize_t length = PyBytes_GET_SIZE(value->following);
            if (size - end < length ||
                memcmp(hit, PyBytes_AS_STRING(value->following), length)) {
                return 0; /* another event */
            }
        }
        places[i][0] = at - value->is_text;
        places[i][1] = end + value->is_text;
        at = end + value->skip;
    }
    *next = at;
    return 1;
}

typedef struct {
    Py_ssize_t (*places)[2];
    Py_ssize_t count, room;
    Py_ssize_t first[16][2]; /* most runs: a piece's few events */
} Texts;

static int
keep_text(Texts *texts, Py_ssize_t start, Py_ssize_t end)
{
    if (texts->count == texts->room) {
        Py_ssize_t room = texts->room * 2;
        Py_ssize_t(*places)[2] = PyMem_Malloc(sizeof(texts->first[0]) * room);
        if (places == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(places, texts->places, sizeof(texts->first[0]) * texts->count);
        if (texts->places != texts->first) {
            PyMem_Free(texts->places);
        }
        texts->places = places;
        texts->room = room;
    }
    texts->places[texts->count][0] = start;
    texts->places[texts->count][1] = end;
    texts->count++;
    return 0;
}

static PyObject *
texts_result(const Texts *texts, PyObject *data, Py_ssize_t events, Py_ssize_t used,
             int escaped)
{
    const char *bytes = PyBytes_AS_STRING(data);
    PyObject *list = PyList_New(texts->count);
    if (list == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < texts->count; i++) {
        Py_ssize_t start = texts->places[i][0], end = texts->places[i][1];
        PyObject *text = PyBytes_FromStringAndSize(bytes + start, end - start);
        if (text == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, text);
    }
    return Py_BuildValue("(NnnO)", list, events, used, escaped ? Py_True : Py_False);
}

static PyObject *
RunReader_read(RunReader *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "read(data: bytes, prefix: bytes)");
        return NULL;
    }
    if (self->count == 0) {
        PyErr_SetString(PyExc_TypeError, "a RunReader not made");
        return NULL;
    }
    const char *data = PyBytes_AS_STRING(args[0]), *prefix = PyBytes_AS_STRING(args[1]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), prefix_size = PyBytes_GET_SIZE(args[1]);
    Py_ssize_t places[MAX_VALUES][2], pos = 0, events = 0;
    Texts texts = {.count = 0, .room = 16};
    texts.places = texts.first;
    int escaped = 0, fits = 1;
    PyObject *result = NULL;
    while (size - pos >= prefix_size && !memcmp(data + pos, prefix, prefix_size)) {
        Py_ssize_t next;
        if (!read_event(self, data, size, pos + prefix_size, places, &next)) {
            break;
        }
        for (int i = 0; fits && i < self->count; i++) {
            const unsigned char *at = (const unsigned char *)data + places[i][0];
            Py_ssize_t length = places[i][1] - places[i][0];
            fits = self->values[i].is_text ? text_fits(at, length, &escaped)
                                           : value_fits(&self->values[i], at, length);
            if (fits && self->values[i].is_text && length > 2 &&
                keep_text(&texts, places[i][0], places[i][1]) < 0) {
                goto done;
            }
        }
        if (!fits) {
            break;
        }
        events++;
        pos = next;
    }
    if (!fits || texts.count == 0) { /* an empty text makes no event */
        result = Py_NewRef(Py_None);
    }
    else {
        result = texts_result(&texts, args[0], events, pos, escaped);
    }
done:
    if (texts.places != texts.first) {
        PyMem_Free(texts.places);
    }
    return result;
}

static PyMethodDef RunReader_methods[] = {
    {"read", (PyCFunction)(void (*)(void))RunReader_read, METH_FASTCALL,
     "read(data, prefix) -> (texts, events, used, escaped) | None"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RunReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "clawpod.sidecar.translation._text_runs.RunReader",
    .tp_doc = "A learnt template's text events, read as runs.",
    .tp_basicsize = sizeof(RunReader),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)RunReader_init,
    .tp_dealloc = (destructor)RunReader_dealloc,
    .tp_methods = RunReader_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "clawpod.sidecar.translation._text_runs",
    .m_doc = "Runs of text events, read against a learnt template in compiled code.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__text_runs(void)
{
    if (PyType_Ready(&RunReaderType) < 0) {
        return NULL;
    }
    PyObject *mod = PyModule_Create(&module);
    if (mod == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(mod, "RunReader", (PyObject *)&RunReaderType) < 0 ||
        PyModule_AddIntConstant(mod, "FREE", KIND_FREE) < 0 ||
        PyModule_AddIntConstant(mod, "NUMBER", KIND_NUMBER) < 0 ||
        PyModule_AddStringConstant(mod, "SOURCE_SHA256", SOURCE_SHA256) < 0) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
