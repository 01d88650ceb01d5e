package luastore

import (
	"math"
	"math/big"
	"runtime"

	"golang.org/x/sys/cpu"
)

// Redis's Lua calls the C library's math functions. Most that the scripts
// use are exact in IEEE arithmetic whoever computes them (floor, ceil, abs,
// sqrt, fmod), but exp is not: Go's math.Exp and glibc's exp differ in
// the last bit for about one argument in eight, and fair.lua stores
// "%.17g" of a sum decayed with math.exp. So math.exp here is glibc's
// algorithm (glibc 2.28 and later, from Arm's optimized routines: a table
// of 2^(k/128) and a polynomial of degree 5), evaluated with the fused
// multiply-adds that GCC forms in the build glibc picks on an x86-64 CPU
// with FMA and AVX2 (and always on arm64), or without them otherwise, so
// that it gives the bits a Redis on this machine gives.

const (
	expTableBits = 7
	expN         = 1 << expTableBits
	expInvLn2N   = 0x1.71547652b82fep0 * expN
	expNegLn2hiN = -0x1.62e42fefa0000p-8
	expNegLn2loN = -0x1.cf79abc9e3b3ap-47
	expShift     = 0x1.8p52
	expC2        = 0x1.ffffffffffdbdp-2
	expC3        = 0x1.555555555543cp-3
	expC4        = 0x1.55555cf172b91p-5
	expC5        = 0x1.1111167a4d017p-7
)

// expTab holds, for k in [0, 128), 2^(k/128) as H*(1+T): expTab[2k] the
// bits of T, expTab[2k+1] the bits of H less k<<45 (so that adding the
// scaled exponent gives the bits of the scale).
var expTab = func() (tab [2 * expN]uint64) {
	const prec = 256
	step := new(big.Float).SetPrec(prec).SetInt64(2)
	for range expTableBits {
		step.Sqrt(step)
	}
	v := new(big.Float).SetPrec(prec).SetInt64(1)
	for k := range expN {
		h, _ := v.Float64()
		hb := new(big.Float).SetPrec(prec).SetFloat64(h)
		t := new(big.Float).SetPrec(prec).Sub(v, hb)
		t.Quo(t, hb)
		tf, _ := t.Float64()
		tab[2*k] = math.Float64bits(tf)
		tab[2*k+1] = math.Float64bits(h) - uint64(k)<<(52-expTableBits)
		v.Mul(v, step)
	}
	return tab
}()

// expFMA tells whether glibc's exp on this machine is its build with fused
// multiply-adds.
var expFMA = cpu.X86.HasFMA && cpu.X86.HasAVX2 || runtime.GOARCH == "arm64"

func top12(x float64) uint32 { return uint32(math.Float64bits(x) >> 52) }

// cExp is glibc's exp(x) (see above), with fused multiply-adds when fma.
func cExp(x float64, fma bool) float64 {
	abstop := top12(x) & 0x7ff
	if abstop-top12(0x1p-54) >= top12(512)-top12(0x1p-54) {
		if abstop-top12(0x1p-54) >= 0x80000000 {
			// Tiny x (0 included).
			return 1.0 + x
		}
		if abstop >= top12(1024) {
			switch {
			case math.Float64bits(x) == math.Float64bits(math.Inf(-1)):
				return 0
			case abstop >= top12(math.Inf(1)):
				return 1.0 + x
			case math.Float64bits(x)>>63 != 0:
				return 0 // underflow
			default:
				return math.Inf(1) // overflow
			}
		}
		// Large |x|: the scale may overflow or be subnormal (specialcase).
		abstop = 0
	}
	// exp(x) = 2^(k/N) * exp(r), x = k*ln2/N + r, |r| <= ln2/2N.
	var kd float64
	if fma {
		kd = math.FMA(expInvLn2N, x, expShift)
	} else {
		z := float64(expInvLn2N * x)
		kd = z + expShift
	}
	ki := math.Float64bits(kd)
	kd -= expShift
	var r float64
	if fma {
		r = math.FMA(kd, expNegLn2loN, math.FMA(kd, expNegLn2hiN, x))
	} else {
		r = x + float64(kd*expNegLn2hiN) + float64(kd*expNegLn2loN)
	}
	idx := 2 * (ki % expN)
	top := ki << (52 - expTableBits)
	tail := math.Float64frombits(expTab[idx])
	sbits := expTab[idx+1] + top
	r2 := float64(r * r)
	var tmp float64
	if fma {
		tmp = math.FMA(float64(r2*r2), math.FMA(r, expC5, expC4), math.FMA(r2, math.FMA(r, expC3, expC2), tail+r))
	} else {
		tmp = tail + r + float64(r2*(expC2+float64(r*expC3))) + float64(float64(r2*r2)*(expC4+float64(r*expC5)))
	}
	if abstop == 0 {
		return expSpecial(tmp, sbits, ki, fma)
	}
	scale := math.Float64frombits(sbits)
	if fma {
		return math.FMA(scale, tmp, scale)
	}
	return scale + float64(scale*tmp)
}

// expSpecial is cExp's end when the scale's exponent may be out of range.
func expSpecial(tmp float64, sbits, ki uint64, fma bool) float64 {
	if ki&0x80000000 == 0 {
		// k > 0: the scale's exponent may have overflowed by up to 460.
		sbits -= 1009 << 52
		scale := math.Float64frombits(sbits)
		var y float64
		if fma {
			y = math.FMA(scale, tmp, scale)
		} else {
			y = scale + float64(scale*tmp)
		}
		return 0x1p1009 * y
	}
	// k < 0: the result may be subnormal; round once, before scaling.
	// scale*tmp has a second use in another basic block here, so GCC
	// fuses neither.
	sbits += 1022 << 52
	scale := math.Float64frombits(sbits)
	st := float64(scale * tmp)
	y := scale + st
	if y < 1.0 {
		lo := scale - y + st
		hi := 1.0 + y
		lo = 1.0 - hi + y + lo
		y = (hi + lo) - 1.0
		if y == 0 {
			y = 0
		}
	}
	return 0x1p-1022 * y
}
