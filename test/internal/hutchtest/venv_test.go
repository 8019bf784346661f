package hutchtest

import "testing"

func TestCheckPinned(t *testing.T) {
	for _, tc := range []struct {
		reqs string
		ok   bool
	}{
		{"# a comment\n\ne2b==2.63.0\npytest==9.2.0\n", true},
		{"e2b\n", false},
		{"e2b>=2.63\n", false},
		{"e2b==2.*\n", false},
		{"e2b==2.63.0; python_version>'3'\n", false},
		{"==1.0\n", false},
		{"-r other.txt\n", false},
	} {
		if err := checkPinned(tc.reqs); (err == nil) != tc.ok {
			t.Errorf("checkPinned(%q) = %v, want ok %v", tc.reqs, err, tc.ok)
		}
	}
}
