package audit

import (
	"reflect"
	"strings"
	"testing"
)

func TestEnv(t *testing.T) {
	got := Env(map[string]string{
		"GITHUB_TOKEN": "ghp_abcdef", "api_key": "k1", "DB_PASSWORD": "pw", "MY_SECRET_X": "s",
		"HOME": "/home/user", "GREETING": "hello sekrit-value",
	}, []string{"sekrit-value"})
	want := map[string]string{
		"GITHUB_TOKEN": Redacted, "api_key": Redacted, "DB_PASSWORD": Redacted, "MY_SECRET_X": Redacted,
		"HOME": "/home/user", "GREETING": "hello " + Redacted,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Env = %v\nwant %v", got, want)
	}
}

func TestCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
		secrets, found   []string
	}{
		{name: "plain", line: "echo hello", want: "echo hello"},
		{name: "assignment", line: "GITHUB_TOKEN=ghp_123 gh repo list", want: "GITHUB_TOKEN=" + Redacted + " gh repo list"},
		{name: "quoted assignment", line: `export API_KEY="a b c"; run`, want: "export API_KEY=" + Redacted + "; run"},
		{name: "flag with space", line: "tool --api-key abc123 --verbose", want: "tool --api-key " + Redacted + " --verbose"},
		{name: "flag with equals", line: "tool --password=hunter22", want: "tool --password=" + Redacted},
		{name: "flag then flag", line: "tool --token --x", want: "tool --token --x"},
		{name: "known secret", line: "curl -H 'Authorization: x-secretvalue'", secrets: []string{"x-secretvalue"},
			want: "curl -H 'Authorization: " + Redacted + "'"},
		{name: "gateway config", line: `mcp-gateway --config '{"githubOfficial":{"githubPersonalAccessToken":"ghp_zzzz"},"exa":{"apiKey":"exa-1234"}}'`,
			want:  `mcp-gateway --config '{"exa":{"apiKey":"[redacted]"},"githubOfficial":{"githubPersonalAccessToken":"[redacted]"}}'`,
			found: []string{"exa-1234", "ghp_zzzz"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, found := CommandLine(tc.line, tc.secrets)
			if got != tc.want {
				t.Errorf("CommandLine(%q)\n = %q\nwant %q", tc.line, got, tc.want)
			}
			if len(found) != len(tc.found) {
				t.Errorf("found %q, want %q", found, tc.found)
			}
		})
	}
}

func TestJSON(t *testing.T) {
	in := map[string]any{
		"path": "/tmp/x", "token": "t0ps3cret", "nested": map[string]any{"Password": "p", "list": []any{"has gw-secret-1 in it", 3.0}},
	}
	got := JSON(in, []string{"gw-secret-1"})
	want := map[string]any{
		"path": "/tmp/x", "token": Redacted, "nested": map[string]any{"Password": Redacted, "list": []any{"has " + Redacted + " in it", 3.0}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON = %v\nwant %v", got, want)
	}
}

// TestShapes: secrets recognised by their shape, whatever they are named
// (the review of issue 22 found these kept in clear).
func TestShapes(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"curl -H 'Authorization: Bearer sk-live-abcdefgh12345678' x", "curl -H 'Authorization: Bearer [redacted]' x"},
		{"psql postgresql://app:PgPass1234@db/x", "psql postgresql://app:[redacted]@db/x"},
		{"git clone https://me:ghp_abcdefghijklmnopqrstuvwxyz0123@github.com/a/b", "git clone https://me:[redacted]@github.com/a/b"},
		{"echo ghp_abcdefghijklmnopqrstuvwxyz0123", "echo [redacted]"},
		{"aws AKIAABCDEFGHIJKLMNOP", "aws [redacted]"},
		{"-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----", "[redacted]"},
		{"https://example.com/path?q=1", "https://example.com/path?q=1"},
		{"echo token", "echo token"},
		{"ls /home/user", "ls /home/user"},
	} {
		if got := String(tc.in, nil); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for name, secret := range map[string]bool{"GH_PAT": true, "PAT": true, "PATH": false, "AWS_SESSION_TOKEN": true, "DATABASE_URL": false, "MY_AUTH": true, "HOME": false} {
		if SecretName(name) != secret {
			t.Errorf("SecretName(%q) = %v, want %v", name, !secret, secret)
		}
	}
	if got := Env(map[string]string{"DATABASE_URL": "mysql://root:hunter22@db:3306/app"}, nil); got["DATABASE_URL"] != "mysql://root:[redacted]@db:3306/app" {
		t.Errorf("DATABASE_URL = %q, want its password redacted", got["DATABASE_URL"])
	}
}

// TestShapesSecondReview: what the second outside review of issue 22 found
// kept in clear, and the misfire it found.
func TestShapesSecondReview(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"curl -u admin:S3cretPW https://x", "curl -u admin:[redacted] https://x"},
		{"curl -H 'X-API-Key: e2b_0123456789012345678901234567890123456789' u", "curl -H 'X-API-Key: [redacted]' u"},
		{"echo e2b_0123456789012345678901234567890123456789", "echo [redacted]"},
		{"sshpass -p hunter22 ssh host", "sshpass -p [redacted] ssh host"},
		{"redis-cli -h r -a R3dispass ping", "redis-cli -h r -a [redacted] ping"},
		{"aws configure set aws_secret_access_key wJalrXUtnFEMI", "aws configure set aws_secret_access_key [redacted]"},
		{"mysql -u root -pSECRETpw db", "mysql -u root -p[redacted] db"},
		{"export AWS=ASIAABCDEFGHIJKLMNOP", "export AWS=[redacted]"},
		{"stripe sk_live_abcdefghijklmnop1234", "stripe [redacted]"},
		{"jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NSJ9.abcdefghijk", "jwt [redacted]"},
		{"git clone https://ghtokenabcdefghijklmnop@github.com/a/b", "git clone https://[redacted]@github.com/a/b"},
		{"Server=db;User Id=sa;Password=P4ss;Database=x", "Server=db;User Id=sa;Password=[redacted];Database=x"},
	} {
		if got := String(tc.in, nil); got != tc.want {
			t.Errorf("String(%q)\n = %q\nwant %q", tc.in, got, tc.want)
		}
	}
	for _, name := range []string{"MYSQL_PWD", "DB_PASS", "PGPASS", "SVC_CREDS", "passphrase", "pwd"} {
		if !SecretName(name) {
			t.Errorf("SecretName(%q) = false", name)
		}
	}
	// In a tool's arguments: keys and strings in arrays.
	got := JSON(map[string]any{"pass": "x1", "args": []any{"API_TOKEN=abcdef123"}}, nil)
	want := map[string]any{"pass": Redacted, "args": []any{"API_TOKEN=" + Redacted}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("JSON = %v, want %v", got, want)
	}
	// A configuration with a ' in a value, quoted as the E2B SDK quotes it.
	line := `mcp-gateway --config '{"a":{"note":"it'"'"'s"},"githubOfficial":{"githubPersonalAccessToken":"ghp_zzzzzzzzzzzz"}}' && echo done`
	red, found := CommandLine(line, nil)
	if strings.Contains(red, "ghp_zzzz") || strings.Contains(red, "it's") || !strings.HasSuffix(red, "&& echo done") || len(found) != 2 {
		t.Errorf("CommandLine(%q)\n = %q (found %q): want every value redacted, the rest kept, both values found", line, red, found)
	}
}
