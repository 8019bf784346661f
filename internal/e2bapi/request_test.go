package e2bapi_test

import (
	"strings"
	"testing"

	"github.com/hutch-sandbox/hutch/internal/e2bapi"
)

func TestNormalizeDefaults(t *testing.T) {
	var v2 e2bapi.NewSandboxV2
	if err := v2.Normalize(); err != nil {
		t.Fatal(err)
	}
	if v2.TemplateID != "base" || *v2.Timeout != 300 || !v2.InternetAccess() {
		t.Errorf("v2 defaults: %+v", v2)
	}
	var v1 e2bapi.NewSandboxV1
	if err := v1.Normalize(); err != nil {
		t.Fatal(err)
	}
	if v1.TemplateID != "base" || *v1.Timeout != 15 || v1.IsSecure() {
		t.Errorf("v1 defaults: %+v", v1)
	}
	given := e2bapi.NewSandboxV2{TemplateID: "t", Timeout: ptr[int32](0)}
	if err := given.Normalize(); err != nil || *given.Timeout != 0 || given.TemplateID != "t" {
		t.Errorf("given values changed: %+v, %v", given, err)
	}
}

func TestNormalizeErrors(t *testing.T) {
	long := func(n int) string { return strings.Repeat("k", n) }
	many := func(n int) map[string]string {
		m := make(map[string]string, n)
		for i := range n {
			m[long(i+1)] = "v"
		}
		return m
	}
	tests := []struct {
		name    string
		req     e2bapi.NewSandboxV2
		wantMsg string // "" = valid
	}{
		{"max timeout", e2bapi.NewSandboxV2{Timeout: ptr(e2bapi.MaxTimeout)}, ""},
		{"negative timeout", e2bapi.NewSandboxV2{Timeout: ptr[int32](-1)}, "timeout: must not be negative, got -1"},
		{"timeout too long", e2bapi.NewSandboxV2{Timeout: ptr(e2bapi.MaxTimeout + 1)}, "timeout: must be at most 86400 seconds (24 hours), got 86401"},
		{"template with space", e2bapi.NewSandboxV2{TemplateID: "a b"}, `templateID: "a b" contains whitespace`},
		{"template too long", e2bapi.NewSandboxV2{TemplateID: long(257)}, "templateID: longer than 256 bytes"},
		{"template name:tag", e2bapi.NewSandboxV2{TemplateID: "team/name:v1"}, ""},
		{"metadata ok", e2bapi.NewSandboxV2{Metadata: many(e2bapi.MaxMetadataEntries)}, ""},
		{"metadata too many", e2bapi.NewSandboxV2{Metadata: many(e2bapi.MaxMetadataEntries + 1)}, "metadata: more than 100 keys (101)"},
		{"metadata empty key", e2bapi.NewSandboxV2{Metadata: map[string]string{"": "v"}}, "metadata: keys must not be empty"},
		{"metadata long key", e2bapi.NewSandboxV2{Metadata: map[string]string{long(257): "v"}}, "metadata: key \"kkkkk"},
		{"metadata long value", e2bapi.NewSandboxV2{Metadata: map[string]string{"k": long(4097)}}, `metadata: value of "k" is longer than 4096 bytes`},
		{"env ok", e2bapi.NewSandboxV2{EnvVars: map[string]string{"PATH": "/bin", "weird name": ""}}, ""},
		{"env too many", e2bapi.NewSandboxV2{EnvVars: many(e2bapi.MaxEnvVars + 1)}, "envVars: more than 1000 variables"},
		{"env empty name", e2bapi.NewSandboxV2{EnvVars: map[string]string{"": "v"}}, "envVars: names must not be empty"},
		{"env name with =", e2bapi.NewSandboxV2{EnvVars: map[string]string{"A=B": "v"}}, `envVars: name "A=B" must not contain '='`},
		{"env value NUL", e2bapi.NewSandboxV2{EnvVars: map[string]string{"A": "x\x00y"}}, `envVars: value of "A" must not contain NUL`},
		{"env value long", e2bapi.NewSandboxV2{EnvVars: map[string]string{"A": long(e2bapi.MaxEnvValueLen + 1)}}, `envVars: value of "A" is longer than`},
		{"port zero", e2bapi.NewSandboxV2{Network: &e2bapi.NetworkConfig{HTTPSPorts: []int{443, 0}}}, "network.httpsPorts[1]: 0 is not a port"},
		{"port high", e2bapi.NewSandboxV2{Network: &e2bapi.NetworkConfig{HTTPSPorts: []int{65536}}}, "network.httpsPorts[0]: 65536 is not a port"},
		{"empty allowOut", e2bapi.NewSandboxV2{Network: &e2bapi.NetworkConfig{AllowOut: []string{" "}}}, "network.allowOut[0]: must not be empty"},
		{"empty denyOut", e2bapi.NewSandboxV2{Network: &e2bapi.NetworkConfig{DenyOut: []string{"10.0.0.0/8", ""}}}, "network.denyOut[1]: must not be empty"},
		{"volume without path", e2bapi.NewSandboxV2{VolumeMounts: []e2bapi.VolumeMount{{Name: "v"}}}, "volumeMounts[0]: name and path are required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.req.Normalize()
			if tt.wantMsg == "" {
				if err != nil {
					t.Fatalf("Normalize: %v", err)
				}
				return
			}
			se := statusErr(t, err)
			if se.Status != 400 || !strings.Contains(se.Message, tt.wantMsg) {
				t.Errorf("Normalize = %d %q, want 400 containing %q", se.Status, se.Message, tt.wantMsg)
			}
		})
	}
}

func TestSmallRequestValidation(t *testing.T) {
	tests := []struct {
		name    string
		v       interface{ Validate() error }
		wantErr bool
	}{
		{"connect empty", &e2bapi.ConnectRequest{}, false},
		{"connect negative", &e2bapi.ConnectRequest{Timeout: ptr[int32](-5)}, true},
		{"connect too long", &e2bapi.ConnectRequest{Timeout: ptr(e2bapi.MaxTimeout + 1)}, true},
		{"resume ok", &e2bapi.ResumeRequest{Timeout: ptr[int32](60)}, false},
		{"resume negative", &e2bapi.ResumeRequest{Timeout: ptr[int32](-1)}, true},
		{"timeout zero", &e2bapi.TimeoutRequest{}, false},
		{"timeout negative", &e2bapi.TimeoutRequest{Timeout: -1}, true},
		{"timeout too long", &e2bapi.TimeoutRequest{Timeout: e2bapi.MaxTimeout + 1}, true},
		{"refresh empty", &e2bapi.RefreshRequest{}, false},
		{"refresh max", &e2bapi.RefreshRequest{Duration: ptr(e2bapi.MaxRefreshDuration)}, false},
		{"refresh too long", &e2bapi.RefreshRequest{Duration: ptr(e2bapi.MaxRefreshDuration + 1)}, true},
		{"refresh negative", &e2bapi.RefreshRequest{Duration: ptr[int32](-1)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.v.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil && statusErr(t, err).Status != 400 {
				t.Errorf("status %d, want 400", statusErr(t, err).Status)
			}
		})
	}
	if got := (&e2bapi.ConnectRequest{}).TimeoutSeconds(); got != 300 {
		t.Errorf("ConnectRequest default timeout = %d", got)
	}
	if got := (&e2bapi.ConnectRequest{Timeout: ptr[int32](7)}).TimeoutSeconds(); got != 7 {
		t.Errorf("ConnectRequest timeout = %d", got)
	}
	if got := (&e2bapi.ResumeRequest{}).TimeoutSeconds(); got != 300 {
		t.Errorf("ResumeRequest default timeout = %d", got)
	}
	if got := (&e2bapi.RefreshRequest{}).DurationSeconds(); got != 300 {
		t.Errorf("RefreshRequest default duration = %d", got)
	}
}
