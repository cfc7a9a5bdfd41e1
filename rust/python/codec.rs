//! Python values ⇄ compact JSON text.
//!
//! Encoding accepts what a job's args or metadata reasonably hold: `None`,
//! booleans, integers of up to [`json::MAX_INT_DIGITS`] digits, finite
//! floats, strings, lists, tuples, dicts with string keys, pydantic models
//! (through their own serializer), dataclasses, `datetime`/`date`/`time`
//! (ISO 8601), `UUID`, `Decimal` (as a string) and enums (their value).
//! Anything else, a NaN or an infinity (also inside a pydantic model, which
//! would write it as `null`), a longer integer, a NUL character or a lone
//! surrogate is refused with the path to the bad value
//! (`args.items[3].name`), never written half-way.
//!
//! Integers beyond 64 bits cross between Python and decimal digits through
//! `num-bigint` (`int.to_bytes`/`int.from_bytes`), not through `str(int)`, so
//! neither direction depends on the interpreter's int/str digit limit.

use std::str::FromStr as _;

use num_bigint::BigInt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use crate::json::{self, Builder, JsonWriter, Number, ParseError, PathPart};
use crate::payload::{check_json_has_no_nul, check_json_ints, Invalid};

/// Nesting deeper than this is refused (it also stops reference cycles).
const MAX_ENCODE_DEPTH: usize = 256;

/// An integer of more bits than this has more than [`json::MAX_INT_DIGITS`]
/// decimal digits: `2^14285 > 10^4300` (`4300 · log2 10 ≈ 14284.3`), so it is
/// refused without converting it. Below, the digits are counted.
const MAX_INT_BITS: u64 = 14_285;

static DATACLASS_FIELDS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DATETIME: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DATE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static TIME: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static UUID: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DECIMAL: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static ENUM: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static TO_JSON_OPTIONS: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
static TO_PYTHON_OPTIONS: PyOnceLock<Py<PyDict>> = PyOnceLock::new();

/// Why encoding stopped: a value that breaks a rule, or a Python error
/// raised by user code we called (a property, a pydantic serializer).
pub enum EncodeError {
    Invalid(Invalid),
    Python(PyErr),
}

impl From<PyErr> for EncodeError {
    fn from(err: PyErr) -> Self {
        EncodeError::Python(err)
    }
}

/// Encodes `value` as JSON; `root` names it in errors (`args`, `metadata`).
pub fn encode(value: &Bound<'_, PyAny>, root: &str) -> Result<String, EncodeError> {
    let mut encoder = Encoder {
        writer: JsonWriter::with_capacity(64),
        path: Vec::new(),
        root,
    };
    encoder.value(value, 0)?;
    Ok(encoder.writer.out)
}

struct Encoder<'r> {
    writer: JsonWriter,
    path: Vec<PathPart>,
    root: &'r str,
}

impl Encoder<'_> {
    fn invalid(&self, message: impl Into<String>) -> EncodeError {
        EncodeError::Invalid(Invalid::new(
            json::render_path(self.root, &self.path),
            message,
        ))
    }

    fn value(&mut self, value: &Bound<'_, PyAny>, depth: usize) -> Result<(), EncodeError> {
        if depth >= MAX_ENCODE_DEPTH {
            return Err(self.invalid(format!(
                "is nested more than {MAX_ENCODE_DEPTH} levels deep (or refers to itself)"
            )));
        }
        // Exact types first: they are the common case and the cheapest test.
        if let Ok(text) = value.cast_exact::<PyString>() {
            return self.string(text);
        }
        if value.is_none() {
            self.writer.null();
            return Ok(());
        }
        if let Ok(flag) = value.cast_exact::<PyBool>() {
            self.writer.bool(flag.is_true());
            return Ok(());
        }
        if let Ok(int) = value.cast_exact::<PyInt>() {
            return self.int(int, true);
        }
        if let Ok(float) = value.cast_exact::<PyFloat>() {
            return self.float(float.value());
        }
        if let Ok(dict) = value.cast_exact::<PyDict>() {
            return self.dict(dict, depth);
        }
        if let Ok(list) = value.cast_exact::<PyList>() {
            return self.sequence(list.iter(), depth);
        }
        if let Ok(tuple) = value.cast_exact::<PyTuple>() {
            return self.sequence(tuple.iter(), depth);
        }
        self.other(value, depth)
    }

    /// Subclasses of the builtins and the richer types.
    fn other(&mut self, value: &Bound<'_, PyAny>, depth: usize) -> Result<(), EncodeError> {
        let py = value.py();
        if is_instance(value, &ENUM, "enum", "Enum")? {
            let inner = value.getattr("value")?;
            return self.value(&inner, depth + 1);
        }
        if let Ok(text) = value.cast::<PyString>() {
            return self.string(text);
        }
        if let Ok(flag) = value.cast::<PyBool>() {
            self.writer.bool(flag.is_true());
            return Ok(());
        }
        if let Ok(int) = value.cast::<PyInt>() {
            return self.int(int, false);
        }
        if let Ok(float) = value.cast::<PyFloat>() {
            return self.float(float.value());
        }
        if let Ok(dict) = value.cast::<PyDict>() {
            return self.dict(dict, depth);
        }
        if let Ok(list) = value.cast::<PyList>() {
            return self.sequence(list.iter(), depth);
        }
        if let Ok(tuple) = value.cast::<PyTuple>() {
            return self.sequence(tuple.iter(), depth);
        }
        if value.hasattr(pyo3::intern!(py, "__pydantic_serializer__"))?
            && !value.is_instance_of::<PyType>()
        {
            return self.pydantic_model(value);
        }
        if value
            .get_type()
            .hasattr(pyo3::intern!(py, "__dataclass_fields__"))?
            && !value.is_instance_of::<PyType>()
        {
            return self.dataclass(value, depth);
        }
        // datetime is a subclass of date, so it is tested first.
        if is_instance(value, &DATETIME, "datetime", "datetime")?
            || is_instance(value, &DATE, "datetime", "date")?
            || is_instance(value, &TIME, "datetime", "time")?
        {
            let iso = value.call_method0(pyo3::intern!(py, "isoformat"))?;
            return self.string(iso.cast::<PyString>().map_err(PyErr::from)?);
        }
        if is_instance(value, &UUID, "uuid", "UUID")?
            || is_instance(value, &DECIMAL, "decimal", "Decimal")?
        {
            let text = value.str()?;
            return self.string(&text);
        }
        let type_name = value.get_type().name()?;
        let hint = if value.is_instance_of::<PyBytes>() {
            " (decode bytes to text, or base64-encode them)"
        } else {
            ""
        };
        Err(self.invalid(format!(
            "a value of type {type_name} cannot be stored as JSON{hint}"
        )))
    }

    fn string(&mut self, text: &Bound<'_, PyString>) -> Result<(), EncodeError> {
        let Ok(text) = text.to_str() else {
            return Err(self.invalid("holds a lone surrogate, which is not valid Unicode"));
        };
        self.writer
            .string(text)
            .map_err(|_| self.invalid("must not contain NUL characters"))
    }

    /// `exact`: the value is an `int`, not a subclass (whose `__str__` could
    /// say anything).
    fn int(&mut self, int: &Bound<'_, PyInt>, exact: bool) -> Result<(), EncodeError> {
        if let Ok(small) = int.extract::<i64>() {
            self.writer.i64(small);
            return Ok(());
        }
        if let Ok(wide) = int.extract::<i128>() {
            self.writer.raw_number(&wide.to_string());
            return Ok(());
        }
        // Beyond 128 bits: exact decimal digits, within the bound.
        let bits: u64 = int
            .call_method0(pyo3::intern!(int.py(), "bit_length"))?
            .extract()?;
        if bits <= MAX_INT_BITS {
            // `str(int)` is the quick way; where the interpreter's digit
            // limit refuses it, num-bigint gives the same digits.
            let quick = if exact { int.str().ok() } else { None };
            let digits = match &quick {
                Some(text) => std::borrow::Cow::Borrowed(text.to_str()?),
                None => std::borrow::Cow::Owned(int.extract::<BigInt>()?.to_string()),
            };
            if digits.trim_start_matches('-').len() <= json::MAX_INT_DIGITS {
                self.writer.raw_number(&digits);
                return Ok(());
            }
        }
        Err(self.invalid(too_long_int()))
    }

    fn float(&mut self, value: f64) -> Result<(), EncodeError> {
        if self.writer.f64(value) {
            Ok(())
        } else {
            Err(self.invalid(non_finite(value)))
        }
    }

    fn dict(&mut self, dict: &Bound<'_, PyDict>, depth: usize) -> Result<(), EncodeError> {
        self.writer.begin_object();
        for (index, (key, item)) in dict.iter().enumerate() {
            let Ok(key) = key.cast::<PyString>() else {
                let type_name = key.get_type().name()?;
                return Err(self.invalid(format!(
                    "has a key of type {type_name}; JSON object keys must be strings"
                )));
            };
            if index > 0 {
                self.writer.comma();
            }
            let Ok(key_text) = key.to_str() else {
                return Err(self.invalid("has a key with a lone surrogate"));
            };
            // A NUL in a key is shown escaped in the error path.
            self.path
                .push(PathPart::Key(key_text.replace('\0', "\\u0000")));
            self.writer
                .string(key_text)
                .map_err(|_| self.invalid("this key must not contain NUL characters"))?;
            self.writer.colon();
            self.value(&item, depth + 1)?;
            self.path.pop();
        }
        self.writer.end_object();
        Ok(())
    }

    fn sequence<'py>(
        &mut self,
        items: impl Iterator<Item = Bound<'py, PyAny>>,
        depth: usize,
    ) -> Result<(), EncodeError> {
        self.writer.begin_array();
        for (index, item) in items.enumerate() {
            if index > 0 {
                self.writer.comma();
            }
            self.path.push(PathPart::Index(index));
            self.value(&item, depth + 1)?;
            self.path.pop();
        }
        self.writer.end_array();
        Ok(())
    }

    /// A pydantic model serializes itself (aliases, custom serializers and
    /// all); its JSON is checked for NUL characters, integers past the bound,
    /// NaN and infinities (written as constants, or as `null`), and embedded.
    fn pydantic_model(&mut self, model: &Bound<'_, PyAny>) -> Result<(), EncodeError> {
        let py = model.py();
        let serializer = model.getattr(pyo3::intern!(py, "__pydantic_serializer__"))?;
        // By alias and in round-trip mode: what `model_validate_json` reads back.
        let options = serializer_options(py, &TO_JSON_OPTIONS, None)?;
        let json =
            match serializer.call_method(pyo3::intern!(py, "to_json"), (model,), Some(options)) {
                Ok(json) => json,
                Err(err) => {
                    return Err(self.invalid(format!(
                        "could not be serialized by pydantic: {}",
                        err.value(py)
                    )))
                }
            };
        let bytes = json.cast::<PyBytes>().map_err(PyErr::from)?.as_bytes();
        let text = std::str::from_utf8(bytes)
            .map_err(|_| self.invalid("pydantic produced JSON that is not UTF-8"))?;
        let here = json::render_path(self.root, &self.path);
        check_json_has_no_nul(&here, text).map_err(EncodeError::Invalid)?;
        check_json_ints(&here, text).map_err(EncodeError::Invalid)?;
        if text.contains("NaN") || text.contains("Infinity") {
            // pydantic can be configured to write these non-JSON constants.
            if !json::is_valid(text) {
                return Err(self.invalid("holds NaN or an infinity, which JSON cannot store"));
            }
        }
        if text.contains("null") {
            // By default pydantic writes NaN and infinities as null, which
            // the model would then refuse to read back.
            self.refuse_nulled_floats(&serializer, model, text)?;
        }
        self.writer.raw(text);
        Ok(())
    }

    /// Refuses a model whose JSON holds `null` where its JSON-mode dump
    /// holds a NaN or an infinity. A model configured to write them as
    /// strings (`ser_json_inf_nan="strings"`) is left alone: it reads back.
    fn refuse_nulled_floats(
        &self,
        serializer: &Bound<'_, PyAny>,
        model: &Bound<'_, PyAny>,
        text: &str,
    ) -> Result<(), EncodeError> {
        let py = model.py();
        let options = serializer_options(py, &TO_PYTHON_OPTIONS, Some("json"))?;
        let dumped =
            match serializer.call_method(pyo3::intern!(py, "to_python"), (model,), Some(options)) {
                Ok(dumped) => dumped,
                Err(err) => {
                    return Err(self.invalid(format!(
                        "could not be serialized by pydantic: {}",
                        err.value(py)
                    )))
                }
            };
        if !holds_non_finite(&dumped, 0)? {
            return Ok(());
        }
        let written = decode(py, text)?;
        let mut path = Vec::new();
        if let Some(value) = nulled_non_finite(&dumped, &written, &mut path, 0)? {
            let mut full = self.path.clone();
            full.extend(path);
            return Err(EncodeError::Invalid(Invalid::new(
                json::render_path(self.root, &full),
                non_finite(value),
            )));
        }
        Ok(())
    }

    fn dataclass(&mut self, instance: &Bound<'_, PyAny>, depth: usize) -> Result<(), EncodeError> {
        let py = instance.py();
        let fields_fn = DATACLASS_FIELDS.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
            Ok(py.import("dataclasses")?.getattr("fields")?.unbind())
        })?;
        let fields = fields_fn.bind(py).call1((instance,))?;
        self.writer.begin_object();
        for (index, field) in fields.try_iter()?.enumerate() {
            let field = field?;
            let name = field.getattr(pyo3::intern!(py, "name"))?;
            let name_text = name
                .cast::<PyString>()
                .map_err(PyErr::from)?
                .to_str()?
                .to_owned();
            let item = instance.getattr(name.cast::<PyString>().map_err(PyErr::from)?)?;
            if index > 0 {
                self.writer.comma();
            }
            self.path.push(PathPart::Key(name_text.clone()));
            self.writer
                .string(&name_text)
                .map_err(|_| self.invalid("this field name must not contain NUL characters"))?;
            self.writer.colon();
            self.value(&item, depth + 1)?;
            self.path.pop();
        }
        self.writer.end_object();
        Ok(())
    }
}

/// The keyword arguments of a pydantic serializer call, made once: by alias
/// and in round-trip mode (what `model_validate_json` reads back), in
/// `mode` when given.
fn serializer_options<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyDict>>,
    mode: Option<&str>,
) -> PyResult<&'py Bound<'py, PyDict>> {
    let options = cell.get_or_try_init(py, || -> PyResult<Py<PyDict>> {
        let options = PyDict::new(py);
        options.set_item("by_alias", true)?;
        options.set_item("round_trip", true)?;
        if let Some(mode) = mode {
            options.set_item("mode", mode)?;
        }
        Ok(options.unbind())
    })?;
    Ok(options.bind(py))
}

fn non_finite(value: f64) -> String {
    format!("{value} cannot be stored as JSON (NaN and infinities are not numbers in JSON)")
}

fn too_long_int() -> String {
    let limit = json::MAX_INT_DIGITS;
    format!(
        "is an integer of more than {limit} digits (awa stores integers of at most {limit} digits)"
    )
}

/// Whether a JSON-mode dump (dicts, lists, scalars) holds a NaN or an
/// infinity anywhere.
fn holds_non_finite(value: &Bound<'_, PyAny>, depth: usize) -> PyResult<bool> {
    if let Ok(float) = value.cast::<PyFloat>() {
        return Ok(!float.value().is_finite());
    }
    if depth >= MAX_ENCODE_DEPTH {
        return Ok(false);
    }
    if let Ok(dict) = value.cast::<PyDict>() {
        for item in dict.values() {
            if holds_non_finite(&item, depth + 1)? {
                return Ok(true);
            }
        }
    } else if let Ok(list) = value.cast::<PyList>() {
        for item in list {
            if holds_non_finite(&item, depth + 1)? {
                return Ok(true);
            }
        }
    } else if let Ok(tuple) = value.cast::<PyTuple>() {
        for item in tuple {
            if holds_non_finite(&item, depth + 1)? {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The first NaN or infinity of a JSON-mode dump that the JSON written for
/// it holds as `null`; `path` is left leading to it.
fn nulled_non_finite(
    dumped: &Bound<'_, PyAny>,
    written: &Bound<'_, PyAny>,
    path: &mut Vec<PathPart>,
    depth: usize,
) -> PyResult<Option<f64>> {
    if let Ok(float) = dumped.cast::<PyFloat>() {
        let value = float.value();
        return Ok((!value.is_finite() && written.is_none()).then_some(value));
    }
    if depth >= MAX_ENCODE_DEPTH {
        return Ok(None);
    }
    if let (Ok(dumped), Ok(written)) = (dumped.cast::<PyDict>(), written.cast::<PyDict>()) {
        for (key, item) in dumped.iter() {
            let Some(stored) = written.get_item(&key)? else {
                continue;
            };
            path.push(PathPart::Key(key.str()?.to_string()));
            if let Some(value) = nulled_non_finite(&item, &stored, path, depth + 1)? {
                return Ok(Some(value));
            }
            path.pop();
        }
    } else if let Ok(written) = written.cast::<PyList>() {
        let items: Vec<Bound<'_, PyAny>> = if let Ok(list) = dumped.cast::<PyList>() {
            list.iter().collect()
        } else if let Ok(tuple) = dumped.cast::<PyTuple>() {
            tuple.iter().collect()
        } else {
            return Ok(None);
        };
        for (index, (item, stored)) in items.iter().zip(written.iter()).enumerate() {
            path.push(PathPart::Index(index));
            if let Some(value) = nulled_non_finite(item, &stored, path, depth + 1)? {
                return Ok(Some(value));
            }
            path.pop();
        }
    }
    Ok(None)
}

fn is_instance(
    value: &Bound<'_, PyAny>,
    cell: &PyOnceLock<Py<PyType>>,
    module: &str,
    name: &str,
) -> PyResult<bool> {
    let class = cell.import(value.py(), module, name)?;
    value.is_instance(class)
}

/// Reads JSON text into Python objects (dict, list, str, int, float,
/// bool, None). Integers beyond 64 bits stay exact.
pub fn decode<'py>(py: Python<'py>, text: &str) -> PyResult<Bound<'py, PyAny>> {
    let mut builder = PyBuilder { py, error: None };
    match json::parse(text, &mut builder) {
        Ok(value) => Ok(value),
        Err(ParseError::Stopped) => Err(builder
            .error
            .unwrap_or_else(|| pyo3::exceptions::PyValueError::new_err("JSON decoding stopped"))),
        Err(error) => Err(pyo3::exceptions::PyValueError::new_err(error.to_string())),
    }
}

struct PyBuilder<'py> {
    py: Python<'py>,
    error: Option<PyErr>,
}

impl PyBuilder<'_> {
    fn keep<T>(&mut self, result: PyResult<T>) -> Result<T, ParseError> {
        result.map_err(|err| {
            self.error = Some(err);
            ParseError::Stopped
        })
    }
}

impl<'py> Builder for PyBuilder<'py> {
    type Value = Bound<'py, PyAny>;
    type Array = Vec<Bound<'py, PyAny>>;
    type Object = Bound<'py, PyDict>;
    type Key = Bound<'py, PyString>;

    fn null(&mut self) -> Result<Self::Value, ParseError> {
        Ok(self.py.None().into_bound(self.py))
    }
    fn bool(&mut self, value: bool) -> Result<Self::Value, ParseError> {
        Ok(PyBool::new(self.py, value).to_owned().into_any())
    }
    fn number(&mut self, text: &str) -> Result<Self::Value, ParseError> {
        let py = self.py;
        match json::number_value(text) {
            Number::Int(value) => {
                let result = value.into_pyobject(py).map(Bound::into_any);
                self.keep(result.map_err(Into::into))
            }
            Number::BigInt(digits) => {
                // `int(digits)` is the quick way; where the interpreter's
                // digit limit refuses it, num-bigint makes the same int.
                let result = match py.get_type::<PyInt>().call1((digits,)) {
                    Ok(int) => Ok(int),
                    Err(_) => BigInt::from_str(digits)
                        .expect("JSON digits read as an integer")
                        .into_pyobject(py)
                        .map(Bound::into_any),
                };
                self.keep(result)
            }
            Number::Float(value) => Ok(PyFloat::new(py, value).into_any()),
        }
    }
    fn string(&mut self, value: &str) -> Result<Self::Value, ParseError> {
        Ok(PyString::new(self.py, value).into_any())
    }
    fn begin_array(&mut self) -> Result<Self::Array, ParseError> {
        Ok(Vec::new())
    }
    fn push(&mut self, array: &mut Self::Array, item: Self::Value) -> Result<(), ParseError> {
        array.push(item);
        Ok(())
    }
    fn end_array(&mut self, array: Self::Array) -> Result<Self::Value, ParseError> {
        let result = PyList::new(self.py, array).map(Bound::into_any);
        self.keep(result)
    }
    fn begin_object(&mut self) -> Result<Self::Object, ParseError> {
        Ok(PyDict::new(self.py))
    }
    fn key(&mut self, key: &str) -> Result<Self::Key, ParseError> {
        Ok(PyString::new(self.py, key))
    }
    fn insert(
        &mut self,
        object: &mut Self::Object,
        key: Self::Key,
        value: Self::Value,
    ) -> Result<(), ParseError> {
        // A repeated key keeps its first position and its last value.
        let result = object.set_item(key, value);
        self.keep(result)
    }
    fn end_object(&mut self, object: Self::Object) -> Result<Self::Value, ParseError> {
        Ok(object.into_any())
    }
}
