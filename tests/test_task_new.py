

@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace("default: 1024", "default: 999"), "default 999 not in values"),
    (lambda t: t.replace("set: {NUM_WARPS: 16}", "set: {NUM_WARPS: 3}"), "not a listed knob value"),
    (lambda t: t.replace("rating: 7.0", "rating: 70"), "rating"),
    (lambda t: t.replace("template: single_pass.py.j2", "template: missing.py.j2"), "missing.py.j2 not found"),
    (lambda t: t.replace("    template: chunked_rows.py.j2", "    templat: chunked_rows.py.j2"), "templat"),
])
def test_a_broken_catalog_names_what_is_wrong(rmsnorm_dir, edit, needle):
    from ksearch.task.catalog import CatalogError

    path = rmsnorm_dir / "strategies" / "catalog.yaml"
    path.write_text(edit(path.read_text()))
    with pytest.raises(CatalogError, match=needle):
        load_catalog(path.parent, "rmsnorm_h4096")
