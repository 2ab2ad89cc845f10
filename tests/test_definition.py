"""A definition is one typed model (ksearch.task.definition.Definition): validated from FlashInfer-Bench's
document, written back as the same document, and its errors name tensors as the document keys them."""

import pytest

from ksearch.task import load_task
from ksearch.task.definition import Definition, DefinitionError, parse_definition


@pytest.fixture(scope="module")
def doc():
    return load_task("trimul_outgoing_h128").definition.to_json()


def test_a_definition_reads_back_what_it_writes(doc):
    d = parse_definition(doc)
    assert isinstance(d, Definition) and parse_definition(d.to_json()) == d and d.to_json() == doc
    assert d.input_names == list(doc["inputs"]) and d.output_names == list(doc["outputs"])
    assert d.inputs[0].name == "x" and d.inputs[0].shape == tuple(doc["inputs"]["x"]["shape"])


@pytest.mark.parametrize("edit,message", [
    (lambda d: {**d, "inputs": {**d["inputs"], "mask": {"shape": ["B"], "dtype": "float99"}}},
     "definition: inputs.mask.dtype: unknown dtype 'float99'"),
    (lambda d: {**d, "outputs": {"out": {"dtype": "float32"}}},
     "definition: outputs.out.shape: required field missing"),
    (lambda d: {**d, "inputs": {**d["inputs"], "x": {"shape": ["Q"], "dtype": "float32"}}},
     "definition: inputs.x: shape uses undeclared axes ['Q']"),
    (lambda d: {**d, "inputs": {}}, "definition: inputs: a definition needs at least one tensor there"),
    (lambda d: {**d, "axes": {**d["axes"], "H": {"type": "const"}}}, "definition: axes.H: a const axis needs"),
    (lambda d: {**d, "reference": "def nope(): pass"}, "definition: reference must define a top-level function `run`"),
])
def test_a_bad_document_is_one_line_naming_where(doc, edit, message):
    with pytest.raises(DefinitionError) as e:
        parse_definition(edit(doc))
    assert str(e.value).startswith(message), str(e.value)


def test_a_reference_file_overrides_the_documents(doc):
    d = parse_definition({**doc, "reference": ""}, "def run(x):\n    return x\n")
    assert d.reference.startswith("def run(x)")
    with pytest.raises(DefinitionError, match="no reference source"):
        parse_definition({**doc, "reference": ""})
