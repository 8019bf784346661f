package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hutch-sandbox/hutch/bench/internal/harness"

	"connectrpc.com/connect"

	fspb "github.com/hutch-sandbox/hutch/api/gen/filesystem"
	"github.com/hutch-sandbox/hutch/api/gen/filesystem/filesystemconnect"
)

// fileKind is one /files transfer.
type fileKind struct {
	key, name string
	upload    bool
	gzip      bool // download with Accept-Encoding: gzip, decoded here
}

var fileKinds = []fileKind{
	{key: "upload", name: "upload (POST, octet-stream)", upload: true},
	{key: "download", name: "download (GET, identity)"},
	{key: "download-gzip", name: "download (GET, Accept-Encoding: gzip, as undici sends)", gzip: true},
}

type fileResult struct {
	kind        fileKind
	size        int64
	unavailable string
	series
}

// largeFile is the size from which a /files row makes -n-large transfers.
const largeFile = 64 << 20

// filePath is where the test file lives inside the sandbox: /tmp is in
// its overlay's writable layer, on the host's disk.
func filePath(size int64) string { return fmt.Sprintf("/tmp/hutch-bench-%d", size) }

// payload is incompressible data (a worst case for the gzip row).
func payload(size int64) []byte {
	buf := make([]byte, size)
	r := rand.NewChaCha8([32]byte{'h', 'u', 't', 'c', 'h'})
	r.Read(buf)
	return buf
}

var payloads = map[int64][]byte{}

func (b *bench) measureFiles(kind fileKind, size int64) *fileResult {
	res := &fileResult{kind: kind, size: size}
	name := fmt.Sprintf("%s %s", sizeName(size), kind.name)
	fmt.Printf("%-66s ", name)
	data, ok := payloads[size]
	if !ok {
		data = payload(size)
		payloads[size] = data
	}
	n, warmup := b.cfg.n, b.cfg.warmup
	if size >= largeFile {
		n, warmup = b.cfg.nLarge, min(warmup, 1)
	}
	path := filePath(size)
	// Downloads read what the upload rows wrote; write it once more in
	// case the upload row was skipped.
	if !kind.upload {
		if _, err := b.upload(path, data); err != nil {
			res.unavailable = "upload before download: " + harness.OneLine(err.Error())
			fmt.Printf("unavailable: %s\n", res.unavailable)
			return res
		}
	}
	res.unavailable = b.run(&res.series, max(warmup, 1), n, func() (time.Duration, error) {
		if kind.upload {
			return b.upload(path, data)
		}
		return b.download(path, size, kind.gzip)
	})
	if kind.key == fileKinds[len(fileKinds)-1].key {
		b.remove(path)
	}
	if res.unavailable != "" {
		fmt.Printf("unavailable: %s\n", res.unavailable)
		return res
	}
	fmt.Printf(" p50 %s ms, %.0f MB/s\n", ms(res.pct(0.5)), mbps(size, res.pct(0.5)))
	return res
}

func mbps(size int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(size) / 1e6 / d.Seconds()
}

func (b *bench) filesURL(path string) string { return harness.FilesURL(b.url, path) }

// upload POSTs data as the file's raw content (harness.UploadFile).
func (b *bench) upload(path string, data []byte) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.runTimeout)
	defer cancel()
	return harness.UploadFile(ctx, b.client, b.filesURL(path), data)
}

// download GETs the file (harness.DownloadFile).
func (b *bench) download(path string, size int64, gz bool) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.runTimeout)
	defer cancel()
	return harness.DownloadFile(ctx, b.client, b.filesURL(path), size, gz)
}

// remove deletes the test file in the sandbox (filesystem.Filesystem/Remove).
func (b *bench) remove(path string) {
	c := filesystemconnect.NewFilesystemClient(b.client, b.url, connect.WithProtoJSON())
	if _, err := c.Remove(context.Background(), connect.NewRequest(&fspb.RemoveRequest{Path: path})); err != nil {
		fmt.Printf("(removing %s: %v) ", path, err)
	}
}

func printFiles(results []*fileResult) {
	rows := [][]string{{"transfer", "runs", "p50", "p95", "p99", "MB/s at p50", "CPU busy", ""}}
	for _, r := range results {
		name := fmt.Sprintf("%s %s", sizeName(r.size), r.kind.name)
		if r.unavailable != "" {
			rows = append(rows, []string{name, "-", "-", "-", "-", "-", "-", "unavailable: " + r.unavailable})
			continue
		}
		runs := fmt.Sprint(len(r.times))
		if r.failed > 0 {
			runs += fmt.Sprintf(" (+%d failed)", r.failed)
		}
		rows = append(rows, []string{name, runs, ms(r.pct(0.5)), ms(r.pct(0.95)), ms(r.pct(0.99)),
			fmt.Sprintf("%.0f", mbps(r.size, r.pct(0.5))), fmt.Sprintf("%.0f%%", 100*r.busy), ""})
	}
	printTable(rows)
	fmt.Println("times in ms from sending the request until the reply (upload) or the last byte (download) is read;")
	fmt.Println("MB/s = 10^6 bytes per second of file content at the p50 time; payload is random (incompressible) data.")
}
