package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hutch-sandbox/hutch/sdk"
)

// A workload is a command run in a sandbox, timed by the client around
// Commands.Run (so one exec round trip is in each time).
type workload struct {
	name, cmd string
}

// pyModules are what the python workload imports: the stdlib's heavier
// packages (numpy is not in the base template).
const pyModules = "json, email, http.client, sqlite3, xml.dom.minidom, asyncio, ssl, decimal, argparse, logging, unittest, urllib.request, csv, zipfile, tarfile"

// compiled are the stdlib packages the compile workload byte-compiles
// (the base template has no C compiler: no cc, gcc, clang or go).
const compiled = "/usr/lib/python3.11/email /usr/lib/python3.11/json /usr/lib/python3.11/http /usr/lib/python3.11/xml /usr/lib/python3.11/asyncio"

var workloads = []workload{
	{"python3 -c 'import json, email, http.client, sqlite3, … (15 stdlib modules)'", "python3 -c 'import " + pyModules + "'"},
	{"git status, repository of 10,000 files (clean)", "git -C ~/repo status >/dev/null"},
	{"compile: python3 -m compileall -f, 5 stdlib packages (no C compiler in base)",
		"PYTHONPYCACHEPREFIX=/tmp/pyc python3 -m compileall -q -f " + compiled},
	{"find /usr -xdev | wc -l (42,000 entries)", "find /usr -xdev | wc -l >/dev/null"},
}

// repoCmd makes ~/repo: 100 directories of 100 small files, committed.
const repoCmd = `python3 -c '
import os
for d in range(100):
    os.makedirs("repo/d%d" % d, exist_ok=True)
    for f in range(100):
        with open("repo/d%d/f%d.txt" % (d, f), "w") as fh: fh.write("file %d %d\n" % (d, f))
' && cd repo && git init -q && git add -A && git -c user.email=bench@hutch -c user.name=bench commit -q -m files && git status >/dev/null && git ls-files | wc -l`

// workRows runs each workload in one sandbox per runtime (made first, with
// the repository): one unmeasured run each, then -n-work rounds, each
// round every workload on both runtimes.
func (b *bench) workRows() {
	fmt.Println("==> syscall-heavy workloads")
	b.tab.section("syscall-heavy workloads (time of Commands.Run, one round trip included)")
	rows := make([]*row, len(workloads))
	for i, w := range workloads {
		rows[i] = b.tab.row(w.name, "ms")
	}
	var sbx [2]*sdk.Sandbox
	for _, con := range b.cons {
		s, err := con.newSandbox()
		if err != nil {
			rows[0].fail(con.rt, err)
			continue
		}
		defer kill(s)
		t0 := time.Now()
		out, err := run(s, repoCmd)
		if err != nil {
			rows[1].fail(con.rt, fmt.Errorf("making the repository: %w", err))
			continue
		}
		if got := strings.TrimSpace(out); got != "10000" {
			rows[1].fail(con.rt, fmt.Errorf("the repository has %s files, not 10000", got))
			continue
		}
		rows[1].note("%s: making and committing the repository took %.1f s (untimed)", con.name, time.Since(t0).Seconds())
		sbx[con.rt] = s
	}
	for i := -1; i < b.cfg.nWork && b.ctx.Err() == nil; i++ {
		for wi, w := range workloads {
			for rt, s := range sbx {
				if s == nil {
					continue
				}
				t0 := time.Now()
				if _, err := run(s, w.cmd); err != nil {
					rows[wi].fail(rt, err)
					continue
				}
				if i >= 0 {
					rows[wi].addTime(rt, time.Since(t0))
				}
			}
		}
	}
}

// filesSize is the size of the /files rows' file.
const filesSize = 64 << 20

// filesRows writes and reads a 64 MiB file of random bytes through the
// SDK's Files (Write: a multipart upload, as E2B's SDKs send it; Read: a
// GET, read to the end) in one sandbox per runtime: one unmeasured
// round, then -n-files.
func (b *bench) filesRows() {
	fmt.Println("==> /files throughput")
	b.tab.section("/files throughput, 64 MiB of random bytes (MB/s = 10^6 bytes per second)")
	wr := b.tab.row("Files.Write (POST /files, multipart)", "MB/s")
	rd := b.tab.row("Files.Read (GET /files)", "MB/s")
	wr.higher, rd.higher = true, true
	data := make([]byte, filesSize)
	rand.NewChaCha8([32]byte{'h', 'u', 't', 'c', 'h'}).Read(data)
	const path = "/home/user/hutch-bench-64m"
	var sbx [2]*sdk.Sandbox
	for _, con := range b.cons {
		s, err := con.newSandbox()
		if err != nil {
			wr.fail(con.rt, err)
			continue
		}
		defer kill(s)
		sbx[con.rt] = s
	}
	mbps := func(d time.Duration) float64 { return float64(filesSize) / 1e6 / d.Seconds() }
	for i := -1; i < b.cfg.nFiles && b.ctx.Err() == nil; i++ {
		for rt, s := range sbx {
			if s == nil {
				continue
			}
			t0 := time.Now()
			if _, err := s.Files.Write(bg(), path, data, nil); err != nil {
				wr.fail(rt, err)
				continue
			}
			t1 := time.Now()
			got, err := s.Files.Read(bg(), path, nil)
			t2 := time.Now()
			switch {
			case err != nil:
				rd.fail(rt, err)
			case !bytes.Equal(got, data):
				rd.fail(rt, fmt.Errorf("read %d bytes, not what was written", len(got)))
			case i >= 0:
				wr.add(rt, mbps(t1.Sub(t0)))
				rd.add(rt, mbps(t2.Sub(t1)))
			}
		}
	}
	for rt, s := range sbx {
		if s != nil {
			if _, err := run(s, "rm -f "+path); err != nil {
				fmt.Printf("warning: %s: %v\n", runtimeNames[rt], err)
			}
		}
	}
}
