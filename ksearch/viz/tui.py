"""`ksearch tui RUN_DIR`: walk a run's plan tree in the terminal (Textual), also while the run is going.

A collapsible tree of the plan on the left; on the right, the selected node in tabs: its plan and the
model's notes, its attempts with the per-workload table, its kernel (highlighted), and the diff against
its parent's kernel. Filters by status and by family; `b` jumps to the best node (for a shape
dispatch, through the nodes of its member kernels).

It follows a live run by polling the journal's size and modification time every second. When the
journal grew, the tree is updated in place (labels changed, nodes added or removed), so the selection,
the expanded nodes and the scroll position survive the update and nothing flickers. It reads the run
directory and never writes to it (it keeps no state there), so it is safe on a run that is being written
and over SSH: Textual draws with escape sequences only, in any terminal.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import Footer, Static, TabbedContent, TabPane, Tree
from textual.widgets.tree import TreeNode

from ksearch.store.best_manifest import BestKind, BestManifest, manifest_from_history
from ksearch.store.history import NotARunError, RunHistory, load_history
from ksearch.store.journal import JournalCorrupted
from ksearch.store.lock import probe
from ksearch.store.short_ids import ShortIds
from ksearch.viz.node_rows import NodeRow, best_mark, node_rows, speedup
from ksearch.viz.node_view import kernel_diff, node_sections, shown_evaluation
from ksearch.viz.tree_view import STATUS_STYLE, no_tree_message, run_summary
from ksearch.world_model import WorldModel
from ksearch.world_model.facts import families
from ksearch.world_model.node import NodeStatus

SECTIONS = ("plan", "attempts", "kernel", "diff")


class NoTerminal(RuntimeError):
    """`ksearch tui` was started without a terminal (redirected, from a script): it could never be driven."""


def run_tui(run_dir: Path, poll_s: float = 1.0, *, need_terminal: bool = True) -> int:
    """Open the app on `run_dir` until the user quits. Everything that makes it pointless to take the
    screen is refused first, in one line: no terminal (NoTerminal), no run or a damaged journal
    (NotARunError, JournalCorrupted), a run that died before it had a tree. A journal damaged while the
    app is open ends it the same way; the message is then returned through `RunBrowser.failure`."""
    if need_terminal and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise NoTerminal(f"ksearch tui needs a terminal (its input or output is not one); in a script use "
                         f"`ksearch show {run_dir}`")
    _check_drawable(Path(run_dir))
    app = RunBrowser(Path(run_dir), poll_s=poll_s)
    app.run()
    if app.failure:
        raise NotARunError(app.failure)
    return 0


def _check_drawable(run_dir: Path) -> None:
    """Raise what the app would only be able to show as an error (a run being created is fine: it waits)."""
    try:
        history = load_history(run_dir)
    except NotARunError:
        if (run_dir / "config.yaml").is_file() and probe(run_dir).live:
            return              # created a moment ago by a live writer: its first records are coming
        raise
    if history.world_model() is None and not history.live:
        raise NotARunError(no_tree_message(history))


def _widest(text: str) -> int:
    return max((len(line.expandtabs()) for line in text.splitlines()), default=0)


class RunBrowser(App[None]):
    """The plan tree beside the selected node's details, refreshed in place while the journal grows."""

    TITLE = "ksearch"
    CSS = """
    #body { height: 1fr; }
    #tree { width: 45%; min-width: 40; border-right: solid $primary-darken-2; }
    #detail { width: 1fr; }
    .pane { min-width: 100%; }
    #status { height: auto; max-height: 3; padding: 0 1; background: $boost; }
    """
    BINDINGS = [
        Binding("b", "best", "best node"),
        Binding("s", "cycle_status", "status filter"),
        Binding("f", "cycle_family", "family filter"),
        Binding("c", "clear_filters", "clear filters"),
        Binding("p", "tab('plan')", "plan", show=False),
        Binding("a", "tab('attempts')", "attempts", show=False),
        Binding("k", "tab('kernel')", "kernel", show=False),
        Binding("d", "tab('diff')", "diff"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(self, run_dir: Path, poll_s: float = 1.0):
        super().__init__()
        self.run_dir = Path(run_dir)
        self.poll_s = poll_s
        self.history: RunHistory | None = None
        self.best: BestManifest | None = None      # what best/ holds, as every view describes it
        self.wm: WorldModel | None = None
        self.ids = ShortIds()
        self.rows: dict[str, NodeRow] = {}
        self.status_filter: str | None = None
        self.family_filter: str | None = None     # a family's full node id
        self._tree_nodes: dict[str, TreeNode] = {}
        self._labels: dict[str, NodeRow] = {}     # the row each label was drawn from: redraw only on change
        self._stamp: tuple[int, int] | None = None
        self._shown: tuple[str, object] | None = None
        self.reloads = 0                          # journal reads that changed something (tests watch it)
        self.failure: str | None = None           # why the app ended on its own (run_tui reports it)

    # ---- layout -------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        with Horizontal(id="body"):
            yield Tree("run", id="tree")
            with TabbedContent(id="detail", initial="tab-plan"):
                for name in SECTIONS:
                    with TabPane(name, id=f"tab-{name}"):
                        with ScrollableContainer():      # long kernel lines scroll sideways
                            yield Static(id=f"pane-{name}", classes="pane")
        yield Static(id="status")
        yield Footer()

    def on_mount(self) -> None:
        tree = self.query_one(Tree)
        tree.show_root = True
        tree.auto_expand = False
        tree.guide_depth = 3        # narrower indents: deep nodes keep their status and score at 80 columns
        self.reload()
        tree.focus()
        self.set_interval(self.poll_s, self.reload)

    # ---- following the journal ----------------------------------------------------------------------
    def _journal_stamp(self) -> tuple[int, int] | None:
        try:
            st = (self.run_dir / "journal.jsonl").stat()
        except OSError:
            return None
        return st.st_size, st.st_mtime_ns

    def reload(self, force: bool = False) -> None:
        """Read the run again if its journal changed since the last read; update everything in place."""
        stamp = self._journal_stamp()
        if stamp == self._stamp and not force:
            return
        self._stamp = stamp
        try:
            history = load_history(self.run_dir)
        except JournalCorrupted as e:         # damage in the middle: nothing more will ever be readable
            self._fail(str(e))
            return
        except NotARunError as e:
            if not probe(self.run_dir).live:
                self._fail(str(e))
                return
            self.query_one("#status", Static).update(Text(str(e), style="red"))
            return
        wm = history.world_model()
        if wm is None:
            if not history.live:              # it died before building a tree: waiting would be forever
                self._fail(no_tree_message(history))
                return
            self.query_one("#status", Static).update(Text("waiting for the run to build its world model ...",
                                                          style="dim"))
            return
        self.history, self.wm = history, wm
        self.ids = ShortIds.from_history(history).covering(wm)
        self.best = manifest_from_history(history, self.ids)
        self.rows = node_rows(wm, self.ids, self.best)
        self.reloads += 1
        self._sync_tree()
        self._show_selected()
        self._update_status()

    def _fail(self, message: str) -> None:
        self.failure = message
        self.exit(return_code=2)

    # ---- the tree -----------------------------------------------------------------------------------
    def visible_ids(self) -> list[str]:
        """Nodes that pass the filters, with their ancestors (so each keeps its place), in tree order."""
        wm = self.wm
        if wm is None:
            return []
        keep: set[str] = {wm.root.node_id}
        for row in self.rows.values():
            if self.status_filter and row.status != self.status_filter:
                continue
            if self.family_filter and row.family != self.family_filter:
                continue
            keep.update(n.node_id for n in wm.path(row.node_id))
        return [n.node_id for n in wm.nodes() if n.node_id in keep]

    def _sync_tree(self) -> None:
        """Make the Tree widget show `visible_ids()`, touching only what changed."""
        tree = self.query_one(Tree)
        wm = self.wm
        assert wm is not None
        selected = tree.cursor_node.data if tree.cursor_node is not None else None
        visible = self.visible_ids()
        wanted = set(visible)
        root_id = wm.root.node_id
        if tree.root.data != root_id:
            tree.root.data = root_id
            self._tree_nodes = {root_id: tree.root}
            self._labels = {}
            tree.root.expand()
        for node_id in [n for n in self._tree_nodes if n not in wanted]:
            tnode = self._tree_nodes.get(node_id)
            if tnode is None:
                continue                      # went with an ancestor removed just before
            self._forget(tnode)
            tnode.remove()
        for node_id in visible:
            if node_id in self._tree_nodes:
                continue
            row = self.rows[node_id]
            assert row.parent_id is not None        # the root is drawn first
            parent = self._tree_nodes[row.parent_id]
            before = self._next_sibling_shown(node_id, wanted)
            tnode = parent.add(self._label(row), data=node_id, before=before,
                               expand=row.on_best_path or row.depth < 2)
            self._tree_nodes[node_id] = tnode
            self._labels[node_id] = row
        for node_id in visible:
            tnode, row = self._tree_nodes[node_id], self.rows[node_id]
            if self._labels.get(node_id) != row:
                tnode.set_label(self._label(row))
                self._labels[node_id] = row
            tnode.allow_expand = bool(tnode.children)
        if selected in self._tree_nodes:
            self._move_to(self._tree_nodes[selected])

    def _forget(self, tnode: TreeNode) -> None:
        for child in tnode.children:
            self._forget(child)
        if tnode.data is not None:
            self._tree_nodes.pop(tnode.data, None)
            self._labels.pop(tnode.data, None)

    def _next_sibling_shown(self, node_id: str, wanted: set[str]) -> TreeNode | None:
        """The sibling after `node_id` (tree order) that is already drawn, to insert before it."""
        wm = self.wm
        assert wm is not None
        parent_id = wm.node(node_id).parent_id
        assert parent_id is not None                # the root is drawn first
        siblings = [c.node_id for c in wm.children(parent_id, include_pruned=True) if c.node_id in wanted]
        for sib in siblings[siblings.index(node_id) + 1:]:
            if sib in self._tree_nodes:
                return self._tree_nodes[sib]
        return None

    def _label(self, row: NodeRow) -> Text:
        """Short id, status and score first, the step last: a narrow tree pane cuts only the step's words."""
        t = Text(no_wrap=True, overflow="ellipsis")
        t.append(f"{row.short} ", style="bold magenta" if row.on_best_path else "bold")
        t.append(best_mark(row) + (row.status if not row.is_best else "best"),
                 style="bold magenta" if row.is_best else STATUS_STYLE.get(row.status, ""))
        if row.score is not None:
            t.append(f" {speedup(row.score)}", style="green")
        t.append(" " + row.title, style="bold" if row.is_best else "")
        return t

    def _move_to(self, tnode: TreeNode) -> None:
        tree = self.query_one(Tree)
        parent = tnode.parent
        while parent is not None:
            parent.expand()
            parent = parent.parent
        tree.get_node_at_line(0)      # lays the lines out again (public call that rebuilds them) ...
        if tree.cursor_node is not tnode:
            tree.move_cursor(tnode)   # ... so the cursor lands on the node, not on its old line number

    @property
    def selected_id(self) -> str | None:
        node = self.query_one(Tree).cursor_node
        return node.data if node is not None else None

    # ---- the detail pane ----------------------------------------------------------------------------
    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        self._show_selected()

    def _show_selected(self) -> None:
        node_id = self.selected_id
        if node_id is None or self.history is None or self.wm is None or node_id not in self.wm:
            return
        # redraw only when the node or what is known about it changed (no flicker on unrelated growth)
        signature = (self.rows.get(node_id), len(self.history.evaluations_of(node_id)), self.wm.node(node_id))
        if self._shown == (node_id, signature):
            return
        self._shown = (node_id, signature)
        sections = node_sections(self.history, node_id, wm=self.wm, ids=self.ids)
        widths: dict[str, int] = {}
        code = self._code_sections(node_id)
        for name, (renderable, width) in code.items():
            sections[name], widths[name] = renderable, width
        for name in SECTIONS:
            pane = self.query_one(f"#pane-{name}", Static)
            pane.styles.width = widths.get(name, "auto")    # code as wide as its longest line: scroll sideways
            pane.update(sections[name])

    def _code_sections(self, node_id: str) -> dict[str, tuple[RenderableType, int]]:
        """The kernel and the diff without a frame, each as wide as its longest line."""
        h, wm = self.history, self.wm
        assert h is not None and wm is not None     # called by _show_selected, which checked
        node = wm.node(node_id)
        shown = shown_evaluation(h, node)
        src = h.solution_source(shown.solution_id) if shown else None
        if shown is None or src is None:
            return {}
        sid = shown.solution_id
        label = "attached kernel" if node.solution and node.solution.solution_id == sid else "last attempt's kernel"
        out: dict[str, tuple[RenderableType, int]] = {"kernel": (Group(Text(f"{label} {sid}", style="bold"),
                                Syntax(src, h.solution_language(sid), line_numbers=True, word_wrap=False)),
                          _widest(src) + 8)}
        base_sid, diff = kernel_diff(h, wm, node, sid)
        if diff is not None:
            diff = diff or "(identical to the parent's kernel)\n"
            out["diff"] = (Group(Text(f"diff against the parent's kernel {base_sid}", style="bold"),
                                 Syntax(diff, "diff", word_wrap=False)), _widest(diff) + 2)
        return out

    def _update_status(self) -> None:
        if self.history is None:
            return
        filters = []
        if self.status_filter:
            filters.append(f"status={self.status_filter}")
        if self.family_filter:
            filters.append(f"family={self.ids.short(self.family_filter)} {self.rows[self.family_filter].title}")
        line = run_summary(self.history)
        line.append("  |  " + ("filter: " + ", ".join(filters) if filters else "no filter"), style="cyan")
        line.append("  |  following the journal" if not self.history.ended else "  |  run ended", style="dim")
        self.query_one("#status", Static).update(line)

    # ---- actions ------------------------------------------------------------------------------------
    def action_best(self) -> None:
        """To the best kernel's node; for a shape dispatch, to its next member's node on each press."""
        best = self.best
        nodes = [n for n in (best.node_ids if best else []) if self.wm is not None and n in self.wm]
        if not nodes:
            self.notify("no best kernel yet")
            return
        current = self.selected_id
        target = nodes[(nodes.index(current) + 1) % len(nodes)] if current in nodes else nodes[0]
        if target not in self._tree_nodes:      # hidden by a filter: show everything again
            self.status_filter = self.family_filter = None
            self._sync_tree()
            self._update_status()
        self._move_to(self._tree_nodes[target])
        self._show_selected()
        if best is not None and best.kind is BestKind.DISPATCH:
            self.notify(f"best/ is a {best.describe()}")

    def action_cycle_status(self) -> None:
        order = [None, *NodeStatus]
        self.status_filter = order[(order.index(self.status_filter) + 1) % len(order)]
        self._filters_changed()

    def action_cycle_family(self) -> None:
        order: list[str | None] = [None, *(f.node_id for f in families(self.wm))] if self.wm is not None else [None]
        current = self.family_filter if self.family_filter in order else None
        self.family_filter = order[(order.index(current) + 1) % len(order)]
        self._filters_changed()

    def action_clear_filters(self) -> None:
        self.status_filter = self.family_filter = None
        self._filters_changed()

    def action_tab(self, name: str) -> None:
        self.query_one(TabbedContent).active = f"tab-{name}"

    def _filters_changed(self) -> None:
        if self.wm is None:
            return
        self._sync_tree()
        tree = self.query_one(Tree)
        if tree.cursor_node is None:
            tree.move_cursor(tree.root)
        self._update_status()
        self._show_selected()
