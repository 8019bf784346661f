package e2bapi_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

// keys marshals v and returns its top-level JSON keys, sorted.
func keys(t *testing.T, v any) []string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// The spec's (§2.5) required and optional field lists.
var (
	listedRequired = []string{"templateID", "sandboxID", "clientID", "startedAt", "endAt", "cpuCount", "memoryMB", "diskSizeMB", "state", "envdVersion"}
	listedOptional = []string{"alias", "metadata", "volumeMounts"}
	detailOptional = []string{"envdAccessToken", "domain", "allowInternetAccess", "network", "lifecycle"}
	metricRequired = []string{"timestamp", "timestampUnix", "cpuCount", "cpuUsedPct", "memUsed", "memTotal", "memCache", "diskUsed", "diskTotal"}
)

func TestResponseFieldNames(t *testing.T) {
	s := "x"
	tests := []struct {
		name      string
		zero, all any
		required  []string
		optional  []string
	}{
		{"Sandbox", e2bapi.Sandbox{},
			e2bapi.Sandbox{SandboxID: "a", TemplateID: "b", ClientID: e2bapi.ClientID, EnvdVersion: "0.6.4", EnvdAccessToken: "t", TrafficAccessToken: &s, Domain: &s, Alias: "c"},
			// trafficAccessToken and domain are optional but nullable;
			// they are always sent, as null when unset.
			[]string{"sandboxID", "templateID", "clientID", "envdVersion", "trafficAccessToken", "domain"},
			[]string{"envdAccessToken", "alias"}},
		{"ListedSandbox", e2bapi.ListedSandbox{}, fullListed(), listedRequired, listedOptional},
		{"SandboxDetail", e2bapi.SandboxDetail{},
			e2bapi.SandboxDetail{ListedSandbox: fullListed(), EnvdAccessToken: "t", Domain: &s, AllowInternetAccess: new(bool),
				Network: &e2bapi.NetworkConfig{}, Lifecycle: &e2bapi.Lifecycle{OnTimeout: e2bapi.OnTimeoutKill}},
			listedRequired, append(slices.Clone(listedOptional), detailOptional...)},
		{"SandboxMetric", e2bapi.SandboxMetric{}, e2bapi.SandboxMetric{CPUCount: 1}, metricRequired, nil},
		{"Lifecycle", e2bapi.Lifecycle{}, e2bapi.Lifecycle{}, []string{"onTimeout", "autoResume"}, nil},
		{"Error", e2bapi.Error{}, e2bapi.Error{ErrorCode: "x"}, []string{"code", "message"}, []string{"error_code"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(sorted(tt.required...), keys(t, tt.zero)); diff != "" {
				t.Errorf("zero value keys (-required +got):\n%s", diff)
			}
			all := append(slices.Clone(tt.required), tt.optional...)
			if diff := cmp.Diff(sorted(all...), keys(t, tt.all)); diff != "" {
				t.Errorf("full value keys (-want +got):\n%s", diff)
			}
		})
	}
}

func fullListed() e2bapi.ListedSandbox {
	return e2bapi.ListedSandbox{Alias: "a", Metadata: map[string]string{"k": "v"}, VolumeMounts: []e2bapi.VolumeMount{{Name: "v", Path: "/p"}}}
}

func TestSandboxJSON(t *testing.T) {
	b, err := json.Marshal(e2bapi.Sandbox{SandboxID: "i1", TemplateID: "base", ClientID: e2bapi.ClientID, EnvdVersion: "0.6.4", EnvdAccessToken: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"sandboxID":"i1","templateID":"base","clientID":"6532622b","envdVersion":"0.6.4","envdAccessToken":"tok","trafficAccessToken":null,"domain":null}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestListedSandboxJSON(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	ls := e2bapi.ListedSandbox{
		TemplateID: "base", SandboxID: "i1", ClientID: e2bapi.ClientID,
		StartedAt: e2bapi.Time(time.Date(2026, 8, 1, 11, 0, 0, 0, cet)),
		EndAt:     e2bapi.Time(time.Date(2026, 8, 1, 10, 5, 0, 500_000_000, time.UTC)),
		CPUCount:  2, MemoryMB: 512, DiskSizeMB: 0, State: e2bapi.StateRunning, EnvdVersion: "0.6.4",
	}
	b, err := json.Marshal(ls)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"templateID":"base","sandboxID":"i1","clientID":"6532622b","startedAt":"2026-08-01T10:00:00Z",` +
		`"endAt":"2026-08-01T10:05:00.5Z","cpuCount":2,"memoryMB":512,"diskSizeMB":0,"state":"running","envdVersion":"0.6.4"}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
	var back e2bapi.ListedSandbox
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if !time.Time(back.StartedAt).Equal(time.Time(ls.StartedAt)) || !time.Time(back.EndAt).Equal(time.Time(ls.EndAt)) {
		t.Errorf("times did not round-trip: %v %v", back.StartedAt, back.EndAt)
	}
}

func TestSandboxDetailJSON(t *testing.T) {
	d := e2bapi.SandboxDetail{
		ListedSandbox:       e2bapi.ListedSandbox{TemplateID: "base", SandboxID: "i1", ClientID: e2bapi.ClientID, State: "paused", EnvdVersion: "0.6.4"},
		AllowInternetAccess: new(bool),
		Lifecycle:           &e2bapi.Lifecycle{OnTimeout: e2bapi.OnTimeoutPause, AutoResume: false},
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{`"allowInternetAccess":false`, `"lifecycle":{"onTimeout":"pause","autoResume":false}`, `"state":"paused"`} {
		if !strings.Contains(string(b), sub) {
			t.Errorf("%s lacks %s", b, sub)
		}
	}
}

func TestSandboxMetricJSON(t *testing.T) {
	m := e2bapi.NewSandboxMetric(time.Unix(1785578400, 0))
	m.CPUCount, m.CPUUsedPct, m.MemUsed, m.MemTotal = 2, 12.5, 1<<20, 1<<30
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"timestamp":"2026-08-01T10:00:00Z","timestampUnix":1785578400,"cpuCount":2,"cpuUsedPct":12.5,` +
		`"memUsed":1048576,"memTotal":1073741824,"memCache":0,"diskUsed":0,"diskTotal":0}`
	if string(b) != want {
		t.Errorf("got  %s\nwant %s", b, want)
	}
}

func TestNetworkRedacted(t *testing.T) {
	n := &e2bapi.NetworkConfig{
		AllowOut:    []string{"1.1.1.1"},
		EgressProxy: json.RawMessage(`{"address":"proxy:3128","username":"u","password":"hunter2"}`),
	}
	r := n.Redacted()
	if got, want := string(r.EgressProxy), `{"address":"proxy:3128","username":"u"}`; got != want {
		t.Errorf("redacted egressProxy = %s, want %s", got, want)
	}
	if !strings.Contains(string(n.EgressProxy), "hunter2") {
		t.Errorf("Redacted modified its receiver")
	}
	if r.AllowOut[0] != "1.1.1.1" {
		t.Errorf("AllowOut lost")
	}
	if got := (&e2bapi.NetworkConfig{EgressProxy: json.RawMessage(`"str"`)}).Redacted(); got.EgressProxy != nil {
		t.Errorf("non-object egressProxy kept: %s", got.EgressProxy)
	}
	if got := (&e2bapi.NetworkConfig{}).Redacted(); got.EgressProxy != nil {
		t.Errorf("absent egressProxy became %s", got.EgressProxy)
	}
	if (*e2bapi.NetworkConfig)(nil).Redacted() != nil {
		t.Errorf("nil.Redacted() != nil")
	}
}
