package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// nodeRecord is the JSON of nodes/<name> as /var/tmp/cluster/contract.md
// (issue 21's contract) gives it: ~500 B with three labels and four
// templates.
type nodeRecord struct {
	Name      string            `json:"name"`
	URL       string            `json:"url"`
	APIURL    string            `json:"apiURL"`
	Labels    map[string]string `json:"labels"`
	Capacity  nodeCapacity      `json:"capacity"`
	Load      nodeLoad          `json:"load"`
	Templates []string          `json:"templates"`
	Started   string            `json:"started"`
}

type nodeCapacity struct {
	CPUs         int `json:"cpus"`
	MemoryMB     int `json:"memoryMB"`
	MaxSandboxes int `json:"maxSandboxes"`
}

type nodeLoad struct {
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memoryMB"`
	Running  int     `json:"running"`
	Inflight int     `json:"inflight"`
	Warm     int     `json:"warm"`
}

// sandboxRecord is the JSON of sandboxes/<id>: owner node, state, key id,
// template, metadata, times, limits (~400 B).
type sandboxRecord struct {
	ID       string            `json:"id"`
	Node     string            `json:"node"`
	State    string            `json:"state"`
	KeyID    string            `json:"keyID"`
	Template string            `json:"template"`
	Metadata map[string]string `json:"metadata"`
	Created  string            `json:"created"`
	Expires  string            `json:"expires"`
	Limits   sandboxLimits     `json:"limits"`
}

type sandboxLimits struct {
	CPUs     int `json:"cpus"`
	MemoryMB int `json:"memoryMB"`
	DiskMB   int `json:"diskMB"`
}

// newNodeRecord is node i's record with no load yet.
func newNodeRecord(i int, name string, started time.Time) nodeRecord {
	ip := fmt.Sprintf("10.%d.%d.%d", 99+i/65536, i/256%256, i%256)
	return nodeRecord{
		Name:   name,
		URL:    "https://" + ip + ":7443",
		APIURL: "https://" + ip + ":3000",
		Labels: map[string]string{"zone": fmt.Sprintf("zone-%d", i%3), "pool": "default", "arch": "amd64"},
		Capacity: nodeCapacity{
			CPUs: 64, MemoryMB: 262144, MaxSandboxes: 1000,
		},
		Templates: []string{
			"base@3f1c9e2a7b5d4c8e9f0a1b2c3d4e5f60",
			"python@8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f30",
			"node@1a2b3c4d5e6f708192a3b4c5d6e7f8a9",
			"desktop@5c6d7e8f90a1b2c3d4e5f60718293a4b",
		},
		Started: started.UTC().Format(time.RFC3339),
	}
}

// withLoad is r's JSON with fresh, made-up load.
func (r nodeRecord) withLoad() []byte {
	r.Load = nodeLoad{
		CPU:      float64(rand.IntN(1000)) / 1000,
		MemoryMB: 4096 + rand.IntN(200000),
		Running:  rand.IntN(1000),
		Inflight: rand.IntN(8),
		Warm:     rand.IntN(16),
	}
	b, _ := json.Marshal(r)
	return b
}

// sandboxJSON is the record of a new sandbox id owned by node.
func sandboxJSON(id, node string, now time.Time) []byte {
	b, _ := json.Marshal(sandboxRecord{
		ID:       id,
		Node:     node,
		State:    "running",
		KeyID:    "key_7f3a9c2e5b1d4f60",
		Template: "base@3f1c9e2a7b5d4c8e9f0a1b2c3d4e5f60",
		Metadata: map[string]string{"user": "bench", "purpose": "etcdsim", "team": "platform", "ci-run": "2026-11-27-0042"},
		Created:  now.UTC().Format(time.RFC3339Nano),
		Expires:  now.Add(5 * time.Minute).UTC().Format(time.RFC3339Nano),
		Limits:   sandboxLimits{CPUs: 2, MemoryMB: 512, DiskMB: 10240},
	})
	return b
}

// sandboxID is a random id like E2B's: 20 lower-case letters and digits.
func sandboxID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 20)
	for i := range b {
		b[i] = alphabet[rand.IntN(len(alphabet))]
	}
	return string(b)
}
