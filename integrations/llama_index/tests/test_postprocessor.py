import pytest
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.postprocessor.ragcache import StableOrderPostprocessor, node_segment


def _nodes():
    return [
        NodeWithScore(node=TextNode(text="gamma text", id_="n3"), score=0.9),
        NodeWithScore(node=TextNode(text="alpha text", id_="n1"), score=0.8),
        NodeWithScore(node=TextNode(text="beta text", id_="n2"), score=0.7),
    ]


def test_any_input_order_gives_the_same_order():
    pp = StableOrderPostprocessor()
    a = [n.node.node_id for n in pp.postprocess_nodes(_nodes())]
    b = [n.node.node_id for n in pp.postprocess_nodes(list(reversed(_nodes())))]
    c = [n.node.node_id for n in pp.postprocess_nodes(_nodes()[1:] + _nodes()[:1])]
    assert a == b == c
    hashes = [node_segment(n.node).render_hash for n in pp.postprocess_nodes(_nodes())]
    assert hashes == sorted(hashes)


def test_order_by_node_id():
    out = StableOrderPostprocessor(order_by="node_id").postprocess_nodes(_nodes())
    assert [n.node.node_id for n in out] == ["n1", "n2", "n3"]


def test_duplicates_removed_keeping_the_higher_score():
    nodes = _nodes() + [
        NodeWithScore(node=TextNode(text="alpha text", id_="copy-of-n1"), score=0.95),  # same bytes, other id
        NodeWithScore(node=TextNode(text="changed", id_="n2"), score=0.1),  # same id again
    ]
    out = StableOrderPostprocessor().postprocess_nodes(nodes)
    assert sorted(n.node.get_content() for n in out) == ["alpha text", "beta text", "gamma text"]
    alpha = next(n for n in out if n.node.get_content() == "alpha text")
    assert alpha.score == 0.95 and alpha.node.node_id == "copy-of-n1"
    keep_all = StableOrderPostprocessor(dedup=False).postprocess_nodes(nodes)
    assert len(keep_all) == 5


def test_segment_keeps_llm_metadata_only_and_no_random_id():
    node = TextNode(text="body", id_="uuid-1", metadata={"title": "Refunds", "last_modified": "2026-01-01"},
                    excluded_llm_metadata_keys=["last_modified"])
    seg = node_segment(node)
    assert seg.id is None and dict(seg.metadata) == {"title": "Refunds"}
    same = TextNode(text="body", id_="uuid-2", metadata={"title": "Refunds", "last_modified": "2027-02-02"},
                    excluded_llm_metadata_keys=["last_modified"])
    assert node_segment(same).content_hash == seg.content_hash  # re-indexing keeps the bytes
    assert node_segment(node, id_source="node_id").id == "uuid-1"


def test_bad_options_raise():
    with pytest.raises(ValueError, match="order_by"):
        StableOrderPostprocessor(order_by="score").postprocess_nodes(_nodes())
    with pytest.raises(ValueError, match="id_source"):
        node_segment(TextNode(text="x"), id_source="random")
