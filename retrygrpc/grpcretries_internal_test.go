package retrygrpc

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// The grpc-go this module requires keeps WithDisableRetry where the
// interceptors read it; a grpc-go that moves it fails here first.
func TestRetryDisabledIsReadable(t *testing.T) {
	t.Parallel()
	require.NotNil(t, disableRetry, "grpc.ClientConn has no dopts.disableRetry bool")
	for _, disabled := range []bool{false, true} {
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
		if disabled {
			opts = append(opts, grpc.WithDisableRetry())
		}
		cc, err := grpc.NewClient("passthrough:///nowhere", opts...)
		require.NoError(t, err)
		got, known := retryDisabled(cc)
		assert.True(t, known)
		assert.Equal(t, disabled, got, "retryDisabled with WithDisableRetry %v", disabled)
		cc.Close()
	}
}
