#include "textflag.h"

// func prefetch(addr uintptr)
TEXT ·prefetch(SB), NOSPLIT, $0-8
	MOVD	addr+0(FP), R0
	PRFM	(R0), PLDL1KEEP
	RET

// func ticks() int64
//
// The virtual counter with no barrier before it: unlike the kernel's
// clock read, it need not wait for the loads ahead of it.
TEXT ·ticks(SB), NOSPLIT, $0-8
	MRS	CNTVCT_EL0, R0
	MOVD	R0, ret+0(FP)
	RET
