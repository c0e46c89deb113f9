"""Signed checkpoints interoperate with Go's ``golang.org/x/mod/sumdb/note``.

An independent implementation of c2sp.org/signed-note (the one Go's checksum database
uses), from Debian's ``golang-golang-x-mod-dev``, built in GOPATH mode with no network: a
note signed here opens there under our verifier key, a note signed there (with a key Go
generated) opens here under Go's verifier key, the same seed gives byte-identical notes on
both sides, and both refuse the same forgeries.

Skips when ``go`` or the x/mod sources are absent, unless ``CI`` is set (then it fails:
``.ci/run`` installs them).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from agentplane_journal import Checkpoint, Digest, NoteSigner, NoteVerificationError

# slow: builds and runs a Go program (and needs Go: left to the CI stage that installs it)
pytestmark = pytest.mark.slow

GOCODE = Path("/usr/share/gocode")
NOTE_SRC = GOCODE / "src/golang.org/x/mod/sumdb/note/note.go"

# A tiny driver over the Go package's public API (note.NewSigner/NewVerifier/GenerateKey/
# Sign/Open). Commands, with the note or text on stdin:
#   open VKEY...     -> exit 0 and the verified text, or exit 1 and Go's error
#   sign SKEY        -> the signed note
#   generate NAME    -> a fresh Go-generated verifier key on line 1, then the signed note
PROGRAM = r"""
package main

import (
	"crypto/rand"
	"fmt"
	"io"
	"os"

	"golang.org/x/mod/sumdb/note"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

func main() {
	input, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "open":
		var verifiers []note.Verifier
		for _, vkey := range os.Args[2:] {
			v, err := note.NewVerifier(vkey)
			if err != nil {
				fail(err)
			}
			verifiers = append(verifiers, v)
		}
		n, err := note.Open(input, note.VerifierList(verifiers...))
		if err != nil {
			fail(err)
		}
		os.Stdout.WriteString(n.Text)
	case "sign":
		s, err := note.NewSigner(os.Args[2])
		if err != nil {
			fail(err)
		}
		msg, err := note.Sign(&note.Note{Text: string(input)}, s)
		if err != nil {
			fail(err)
		}
		os.Stdout.Write(msg)
	case "generate":
		skey, vkey, err := note.GenerateKey(rand.Reader, os.Args[2])
		if err != nil {
			fail(err)
		}
		s, err := note.NewSigner(skey)
		if err != nil {
			fail(err)
		}
		msg, err := note.Sign(&note.Note{Text: string(input)}, s)
		if err != nil {
			fail(err)
		}
		fmt.Println(vkey)
		os.Stdout.Write(msg)
	}
}
"""

SEED = bytes(range(100, 132))
CP = Checkpoint("example.com/agentplane", 1234567, Digest.of(b"a root"))


@pytest.fixture(scope="module")
def go_note(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go = shutil.which("go")
    if go is None or not NOTE_SRC.is_file():
        missing = "go" if go is None else str(NOTE_SRC)
        message = f"{missing} is not installed (apt-get install golang-go golang-golang-x-mod-dev)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Go interop test: {message}")
        pytest.skip(message)
    tmp = tmp_path_factory.mktemp("gonote")
    (tmp / "src" / "apjnote").mkdir(parents=True)
    (tmp / "src" / "apjnote" / "main.go").write_text(PROGRAM)
    env = {
        **os.environ,
        "GO111MODULE": "off",
        "GOPATH": f"{GOCODE}:{tmp}",
        "GOFLAGS": "",
        "GOCACHE": str(tmp / "cache"),
        "GOPROXY": "off",
        "HOME": str(tmp),
    }
    binary = tmp / "apjnote"
    built = subprocess.run(
        [go, "build", "-o", str(binary), "apjnote"],
        env=env,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    return binary


def run_go(binary: Path, *args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], input=stdin, capture_output=True, text=True, timeout=60
    )


def test_a_note_signed_here_verifies_in_go(go_note: Path) -> None:
    signer = NoteSigner("example.com/agentplane", SEED)
    witness = NoteSigner("witness.example/w", bytes(32))
    note = CP.to_signed_note(signer, witness)
    opened = run_go(go_note, "open", signer.verifier_key, stdin=note)
    assert opened.returncode == 0, opened.stderr
    assert opened.stdout == CP.to_note()
    # Go too ignores the signature of a key it does not know and requires a known one.
    unknown = run_go(go_note, "open", NoteSigner("other.example/k", SEED).verifier_key, stdin=note)
    assert unknown.returncode == 1 and "no verifiable signatures" in unknown.stderr
    # And refuses the same forgery this package refuses.
    forged = (
        Checkpoint(CP.origin, CP.size, Digest.of(b"forged")).to_note() + note[len(CP.to_note()) :]
    )
    refused = run_go(go_note, "open", signer.verifier_key, stdin=forged)
    assert refused.returncode == 1 and "invalid signature" in refused.stderr
    with pytest.raises(NoteVerificationError):
        Checkpoint.from_signed_note(forged, [signer.verifier_key])


def test_a_note_signed_in_go_verifies_here(go_note: Path) -> None:
    made = run_go(go_note, "generate", "example.com/agentplane", stdin=CP.to_note())
    assert made.returncode == 0, made.stderr
    vkey, note = made.stdout.split("\n", 1)
    assert Checkpoint.from_signed_note(note, [vkey]) == CP
    with pytest.raises(NoteVerificationError, match="no trusted key"):
        Checkpoint.from_signed_note(note, [NoteSigner("example.com/agentplane", SEED).verifier_key])


def test_one_seed_gives_byte_identical_notes_and_keys_in_both(go_note: Path) -> None:
    signer = NoteSigner("example.com/agentplane", SEED)
    # Go's private-key text: PRIVATE+KEY+name+hash+base64(0x01 || seed), built from the spec.
    skey = "PRIVATE+KEY+{}+{:08x}+{}".format(
        signer.name, signer.key_hash, base64.b64encode(b"\x01" + SEED).decode()
    )
    made = run_go(go_note, "sign", skey, stdin=CP.to_note())
    assert made.returncode == 0, made.stderr
    assert made.stdout == CP.to_signed_note(signer)
