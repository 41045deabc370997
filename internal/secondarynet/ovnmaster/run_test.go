package ovnmaster

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// TestRetryLimiterCapsTheWait checks that a request failing again and again (the NB database
// out of reach for a while) is tried again within maxRetryDelay however often it failed, and
// that the first retries stay quick; controller-runtime's default waits up to 1000 s.
func TestRetryLimiterCapsTheWait(t *testing.T) {
	l := retryLimiter()
	red := reconcile.Request{NamespacedName: types.NamespacedName{Name: "red"}}
	if first := l.When(red); first > 10*time.Millisecond {
		t.Errorf("the first retry waits %s, want a few milliseconds", first)
	}
	var last time.Duration
	for range 30 {
		last = l.When(red)
	}
	if last > maxRetryDelay || last < maxRetryDelay/2 {
		t.Errorf("after 31 failures a retry waits %s, want about %s", last, maxRetryDelay)
	}
	l.Forget(red)
	if again := l.When(red); again > 10*time.Millisecond {
		t.Errorf("after a success the next failure waits %s, want a few milliseconds again", again)
	}
}
