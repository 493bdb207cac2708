"""The web chat's assets (API.md "Web chat"): shipped in the package (a built wheel holds
them), served from it as they are, self-contained (nothing from another origin), open
without the token while the API behind them is not, and no path reaches past their folder."""

from __future__ import annotations

import hashlib
import re
import zipfile
from importlib import resources
from pathlib import Path

import pytest

from steerloop.service import create_app

from .served import served

ROOT = Path(__file__).resolve().parents[2]
WEB = resources.files("steerloop.service").joinpath("_web")
ASSETS = sorted(p.name for p in WEB.iterdir() if p.is_file())
# Release files of npm packages, byte for byte (their licenses and versions: vendor/).
VENDORED = {
    "marked.js": "4d2d824f3035e79b6887380d88c6c9ca0958215d1f4f6c053c562d60babc7172",
    "purify.js": "5e8c53cd086a012531fc754ee6a7ad7a02e8a06fc4dadd805b912e128c3f6c58",
}
VENDOR_NOTES = ["vendor/README.md", "vendor/dompurify.LICENSE", "vendor/marked.LICENSE"]


def test_the_assets_are_the_pages_files() -> None:
    assert ASSETS == [
        "api.js",
        "app.js",
        "attach.js",
        "feed.js",
        "icon.svg",
        "index.html",
        "inputs.js",
        "markdown.js",
        "marked.js",
        "panels.css",
        "prompts.js",
        "purify.js",
        "replay.js",
        "style.css",
        "transcript.js",
    ]


def test_the_vendored_libraries_are_the_pinned_releases_with_their_licenses() -> None:
    """The README's table names each file's package, version and hash; the test holds them."""
    notes = WEB.joinpath("vendor", "README.md").read_text(encoding="utf-8")
    for name, digest in VENDORED.items():
        assert hashlib.sha256(WEB.joinpath(name).read_bytes()).hexdigest() == digest, name
        assert digest in notes
    assert "marked` | 18.3.0" in notes and "dompurify` | 3.5.0" in notes
    assert "MIT license" in WEB.joinpath("vendor", "marked.LICENSE").read_text(encoding="utf-8")
    apache = WEB.joinpath("vendor", "dompurify.LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in apache


async def test_every_asset_is_served_from_the_package_with_its_type(tmp_path: Path) -> None:
    app = create_app(f"sqlite:///{tmp_path / 's.db'}", token="t0ken")
    async with served(app) as client:
        index = await client.get("/")
        assert index.status_code == 200
        # The page as shipped, told the attachment caps (the defaults here) on its <body>.
        told = (
            b'<body data-max-attachment-bytes="10485760" '
            b'data-max-message-attachment-bytes="20971520">'
        )
        assert index.content == WEB.joinpath("index.html").read_bytes().replace(b"<body>", told)
        assert index.headers["content-type"] == "text/html; charset=utf-8"
        csp = index.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "default-src 'none'" in csp
        assert index.headers["x-content-type-options"] == "nosniff"
        types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
        for name in ASSETS:
            if name == "index.html":
                continue
            answer = await client.get(f"/_web/{name}")
            assert answer.status_code == 200, name
            assert answer.content == WEB.joinpath(name).read_bytes()
            assert answer.headers["content-type"].startswith(types[Path(name).suffix])
        # the page is open; the API it calls still needs the token
        assert (await client.get("/v1/sessions")).status_code == 401


def test_the_page_references_only_its_own_assets() -> None:
    """No CDN, nothing fetched from elsewhere: every URL in the HTML, every module import and
    every url() in the CSS is one of the package's assets."""
    referenced: set[str] = set()
    for name in ASSETS:
        text = WEB.joinpath(name).read_text(encoding="utf-8")
        if name in VENDORED:
            # Release files as published (URLs in their comments and strings); what they
            # import is what counts, and they import nothing.
            assert not re.findall(r'^import|\bimport\s*\(|from "([^"]+)"', text, re.M), name
            continue
        assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "https://" not in text
        referenced.update(re.findall(r'(?:src|href)="([^"]+)"', text))
        referenced.update(re.findall(r'from "([^"]+)"', text))
        referenced.update(re.findall(r"url\(([^)]*)\)", text))
    local = {ref.removeprefix("/_web/").removeprefix("./") for ref in referenced}
    assert local <= set(ASSETS), local - set(ASSETS)


@pytest.mark.parametrize(
    "path",
    [
        "/_web/nope.js",
        "/_web/_page.py",
        "/_web/..%2F_page.py",
        "/_web/%2e%2e%2f_app.py",
        "/_web/index.html.js",
        "/_web/.hidden.js",
        "/_web/" + "a" * 300 + ".js",
    ],
)
async def test_paths_outside_the_assets_are_not_found(tmp_path: Path, path: str) -> None:
    async with served(create_app(f"sqlite:///{tmp_path / 's.db'}")) as client:
        answer = await client.get(path)
        assert answer.status_code == 404
        assert answer.json()["error"]["code"] in ("not_found",)
        assert b"import" not in answer.content


def test_a_built_wheel_ships_the_assets(tmp_path: Path) -> None:
    """What ``pip install steerloop`` gets: the wheel hatchling builds from this tree."""
    from hatchling.builders.wheel import WheelBuilder

    builder = WheelBuilder(str(ROOT))
    built = list(builder.build(directory=str(tmp_path), versions=["standard"]))
    assert len(built) == 1
    with zipfile.ZipFile(built[0]) as wheel:
        shipped = {
            name.removeprefix("steerloop/service/_web/"): wheel.read(name)
            for name in wheel.namelist()
            if name.startswith("steerloop/service/_web/")
        }
    assert sorted(shipped) == sorted([*ASSETS, *VENDOR_NOTES])
    assert all(shipped[name] == WEB.joinpath(name).read_bytes() for name in shipped)
