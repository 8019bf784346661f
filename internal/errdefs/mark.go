package errdefs

// Mark returns an error that errors.Is and errors.As match against class as
// well as against err and everything err wraps, and whose message is err's
// alone. It classifies an error whose words a protocol fixes (the reference
// envd's "process with pid 7 not found") without the ": not found" that
// wrapping with %w would add. Mark(nil, class) is nil.
func Mark(err, class error) error {
	if err == nil {
		return nil
	}
	return &marked{err: err, class: class}
}

// marked is an error with a class attached; see Mark.
type marked struct {
	err, class error
}

func (m *marked) Error() string { return m.err.Error() }

// Unwrap returns the class and the error, so that errors.Is sees both.
func (m *marked) Unwrap() []error { return []error{m.class, m.err} }
