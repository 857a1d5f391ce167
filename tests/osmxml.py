"""Small hand-made OSM XML files for tests."""

from __future__ import annotations

from pathlib import Path

# 3 x 3 grid, 1..9, about 111 m apart (0.001 deg lat); elevation rises to the north-east
#   7 - 8 - 9
#   |   |   |
#   4 - 5 - 6 -- 10 (dead-end spur)
#   |   |   |
#   1 - 2 - 3
NODES = {
    1: (45.000, 7.000), 2: (45.000, 7.0014), 3: (45.000, 7.0028),
    4: (45.001, 7.000), 5: (45.001, 7.0014), 6: (45.001, 7.0028),
    7: (45.002, 7.000), 8: (45.002, 7.0014), 9: (45.002, 7.0028),
    10: (45.001, 7.0042), 11: (45.0005, 7.0050), 12: (45.0005, 7.0060),
}
WAYS = [
    # id, nodes, tags
    (101, [1, 2, 3], {"highway": "residential", "maxspeed": "30"}),
    (102, [4, 5, 6], {"highway": "secondary", "maxspeed": "50"}),
    (103, [7, 8, 9], {"highway": "residential"}),
    (104, [1, 4, 7], {"highway": "tertiary", "maxspeed": "20 mph"}),
    (105, [2, 5, 8], {"highway": "residential", "oneway": "yes"}),
    (106, [3, 6, 9], {"highway": "primary"}),
    (107, [6, 10], {"highway": "residential"}),
    (108, [10, 11, 12], {"highway": "footway"}),
]
RELATIONS = [
    # no left turn from way 102 (eastbound, into node 5) onto way 105 north (5 -> 8)
    (201, {"from": 102, "to": 105, "via": 5}, "no_left_turn"),
]


def elevation(lat: float, lon: float) -> float:
    return 100.0 + (lat - 45.0) * 10000 + (lon - 7.0) * 5000


def write_osm(path: Path, ele: bool = True, relations: bool = True, ways=None) -> Path:
    lines = ['<?xml version="1.0" encoding="UTF-8"?>', '<osm version="0.6" generator="test">']
    for nid, (lat, lon) in NODES.items():
        tag = f'<tag k="ele" v="{elevation(lat, lon):.2f}"/>' if ele else ""
        lines.append(f'<node id="{nid}" lat="{lat}" lon="{lon}" version="1">{tag}</node>')
    for wid, nodes, tags in ways if ways is not None else WAYS:
        body = "".join(f'<nd ref="{n}"/>' for n in nodes)
        body += "".join(f'<tag k="{k}" v="{v}"/>' for k, v in tags.items())
        lines.append(f'<way id="{wid}" version="1">{body}</way>')
    if relations:
        for rid, m, kind in RELATIONS:
            lines.append(
                f'<relation id="{rid}" version="1"><member type="way" ref="{m["from"]}" role="from"/>'
                f'<member type="node" ref="{m["via"]}" role="via"/>'
                f'<member type="way" ref="{m["to"]}" role="to"/>'
                f'<tag k="restriction" v="{kind}"/><tag k="type" v="restriction"/></relation>')
    lines.append("</osm>")
    path.write_text("\n".join(lines))
    return path
