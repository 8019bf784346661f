package cluster

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRetryNoLeader(t *testing.T) {
	other := status.Error(codes.Unavailable, "error reading from server: connection reset")
	for _, tc := range []struct {
		name    string
		answers []error // one per try; the last repeats
		tries   int
		want    error
	}{
		{"answered", []error{nil}, 1, nil},
		{"a member without a leader, then one with", []error{rpctypes.ErrGRPCNoLeader, rpctypes.ErrGRPCNoLeader, nil}, 3, nil},
		{"no member has a leader", []error{rpctypes.ErrGRPCNoLeader}, noLeaderTries, rpctypes.ErrGRPCNoLeader},
		// A write may have been applied: not this interceptor's to retry.
		{"another unavailable", []error{other}, 1, other},
		{"not found", []error{rpctypes.ErrGRPCLeaseNotFound}, 1, rpctypes.ErrGRPCLeaseNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tries := 0
			invoke := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
				err := tc.answers[min(tries, len(tc.answers)-1)]
				tries++
				return err
			}
			err := retryNoLeader(context.Background(), "/etcdserverpb.KV/Put", nil, nil, nil, invoke)
			if !errors.Is(err, tc.want) || tries != tc.tries {
				t.Fatalf("err %v after %d tries; want %v after %d", err, tries, tc.want, tc.tries)
			}
		})
	}
}
