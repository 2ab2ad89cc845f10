"""The world model: plan nodes, the tree, edit scripts, the frontier, fallbacks and prompt renderings."""

from ksearch.world_model.edits import EditScript, EditScriptError, parse_edit_script, parse_edit_text
from ksearch.world_model.fallback import NoFallbackError, fallback_edit
from ksearch.world_model.node import Action, AttachedSolution, Node, NodeStatus
from ksearch.world_model.render import render_compact, render_frontier
from ksearch.world_model.tree import ROOT_ID, EditResult, WorldModel

__all__ = [
    "Action", "AttachedSolution", "Node", "NodeStatus", "EditScript", "EditScriptError", "parse_edit_script",
    "parse_edit_text", "WorldModel", "EditResult", "ROOT_ID", "render_compact", "render_frontier",
    "fallback_edit", "NoFallbackError",
]
