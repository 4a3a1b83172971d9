#include "textflag.h"

// func store16(p *byte, lo, hi uint64)
TEXT ·store16(SB), NOSPLIT, $0-24
	MOVQ	p+0(FP), DI
	MOVQ	lo+8(FP), X0
	MOVQ	hi+16(FP), X1
	PUNPCKLQDQ	X1, X0
	MOVOU	X0, (DI)
	RET
