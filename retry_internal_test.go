package retry

import (
	"testing"
	"unsafe"
)

// TestPolicySize keeps Policy a multiple of 16 bytes; see its padding.
func TestPolicySize(t *testing.T) {
	if size := unsafe.Sizeof(Policy{}); size%16 != 0 {
		t.Errorf("unsafe.Sizeof(Policy{}) = %d, want a multiple of 16: adjust the padding at its end", size)
	}
}
