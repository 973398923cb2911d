package retrygrpc_test

import (
	"testing"

	"github.com/seed93a044d1/retry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb" // registers wrappers.proto, which the file imports
)

// registerProto registers, as generated code does when it is linked in, a
// .proto file declaring the service idemtest.Store, whose Get is
// IDEMPOTENT, Peek NO_SIDE_EFFECTS, and Create neither.
func registerProto(t *testing.T) {
	t.Helper()
	method := func(name string, level *descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodDescriptorProto {
		m := &descriptorpb.MethodDescriptorProto{
			Name:       proto.String(name),
			InputType:  proto.String(".google.protobuf.StringValue"),
			OutputType: proto.String(".google.protobuf.StringValue"),
		}
		if level != nil {
			m.Options = &descriptorpb.MethodOptions{IdempotencyLevel: level}
		}
		return m
	}
	fd := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("retrygrpc/idemtest.proto"),
		Package:    proto.String("idemtest"),
		Syntax:     proto.String("proto3"),
		Dependency: []string{"google/protobuf/wrappers.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Store"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Get", descriptorpb.MethodOptions_IDEMPOTENT.Enum()),
				method("Peek", descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()),
				method("Create", nil),
			},
		}},
	}
	if _, err := protoregistry.GlobalFiles.FindFileByPath(fd.GetName()); err == nil {
		return // registered by an earlier run of the test (-count)
	}
	file, err := protodesc.NewFile(fd, protoregistry.GlobalFiles)
	require.NoError(t, err)
	require.NoError(t, protoregistry.GlobalFiles.RegisterFile(file))
}

// A method whose .proto says idempotency_level = IDEMPOTENT or
// NO_SIDE_EFFECTS is idempotent without any option.
func TestProtoIdempotencyLevel(t *testing.T) {
	registerProto(t) // before any parallel test reads the registry
	t.Parallel()
	each(t, func(t *testing.T, nw network, exact bool) {
		s := newServer(fail(codes.Unavailable))
		conn, stop := start(t, nw, s, retry.Policy{MaxAttempts: 3, Backoff: retry.Constant(0)})
		defer stop()

		for _, tc := range []struct {
			method string
			calls  int
		}{
			{"/idemtest.Store/Get", 3},
			{"/idemtest.Store/Peek", 3},
			{"/idemtest.Store/Create", 1},
			{"/idemtest.Store/Missing", 1},
		} {
			before := s.count()
			_, err := invoke(t.Context(), conn, tc.method)
			assert.Equal(t, codes.Unavailable, status.Code(err), tc.method)
			assert.Equal(t, tc.calls, s.count()-before, tc.method)
		}
	})
}
