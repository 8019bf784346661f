package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRetryElsewhere(t *testing.T) {
	other := status.Error(codes.Unavailable, "error reading from server: connection reset")
	// hang is a member that lags: it answers when the try's context ends.
	hang := errors.New("hang")
	const put, txn = "/etcdserverpb.KV/Put", "/etcdserverpb.KV/Txn"
	for _, tc := range []struct {
		name    string
		method  string
		timeout time.Duration // the caller's
		answers []error       // one per try; the last repeats
		tries   int
		want    error
	}{
		{"answered", put, 3 * time.Second, []error{nil}, 1, nil},
		{"a member without a leader, then one with", txn, 3 * time.Second, []error{rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCNoLeader, nil}, 3, nil},
		{"no member has a leader", txn, 3 * time.Second, []error{rpctypes.ErrGRPCNoLeader}, callTries, rpctypes.ErrGRPCNoLeader},
		// A write may have been applied: not this interceptor's to retry.
		{"another unavailable", put, 3 * time.Second, []error{other}, 1, other},
		{"not found", put, 3 * time.Second, []error{rpctypes.ErrGRPCLeaseNotFound}, 1, rpctypes.ErrGRPCLeaseNotFound},
		{"a lagging member, then one that answers", put, 3 * time.Second, []error{hang, nil}, 2, nil},
		// The last try has what is left: 1 s, then 2 s.
		{"every member lags", put, 3 * time.Second, []error{hang}, 2, context.DeadlineExceeded},
		// A Txn that timed out may have been applied.
		{"a Txn that lags is not sent again", txn, 3 * time.Second, []error{hang, nil}, 1, context.DeadlineExceeded},
		// No time for a short try: one try with all of it.
		{"a short deadline", put, 1500 * time.Millisecond, []error{hang, nil}, 1, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			invoke := func(ctx context.Context, _ string, _, _ any, _ *grpc.ClientConn, _ ...grpc.CallOption) error {
				err := tc.answers[min(tries, len(tc.answers)-1)]
				tries++
				if err == hang {
					<-ctx.Done()
					return status.FromContextError(ctx.Err()).Err()
				}
				return err
			}
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			err := retryElsewhere(ctx, tc.method, nil, nil, nil, invoke)
			if tc.want == context.DeadlineExceeded {
				if status.Code(err) != codes.DeadlineExceeded || tries != tc.tries {
					t.Fatalf("err %v after %d tries; want a deadline after %d", err, tries, tc.tries)
				}
				return
			}
			if !errors.Is(err, tc.want) || tries != tc.tries {
				t.Fatalf("err %v after %d tries; want %v after %d", err, tries, tc.want, tc.tries)
			}
		})
	}
}
