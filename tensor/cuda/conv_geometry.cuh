// Conv2DGeometry (cuda_kernels.h) in 32-bit ints, as kernels read it when
// their callers bound every index below 2^30 (DirectConvTakes,
// ConvInputGradTakes): 32-bit index arithmetic, and a kernel argument half
// the size. Only for .cu files.
#ifndef MIRRORTRAIN_TENSOR_CUDA_CONV_GEOMETRY_CUH_
#define MIRRORTRAIN_TENSOR_CUDA_CONV_GEOMETRY_CUH_

#include "tensor/cuda/cuda_kernels.h"

namespace mirrortrain::cuda {

struct Conv2DGeometry32 {
  explicit Conv2DGeometry32(const Conv2DGeometry& g)
      : n(static_cast<int>(g.n)),
        h(static_cast<int>(g.h)),
        w(static_cast<int>(g.w)),
        c(static_cast<int>(g.c)),
        oh(static_cast<int>(g.oh)),
        ow(static_cast<int>(g.ow)),
        o(static_cast<int>(g.o)),
        kh(static_cast<int>(g.kh)),
        kw(static_cast<int>(g.kw)),
        sh(static_cast<int>(g.sh)),
        sw(static_cast<int>(g.sw)),
        pt(static_cast<int>(g.pt)),
        pl(static_cast<int>(g.pl)) {}
  int n, h, w, c, oh, ow, o, kh, kw, sh, sw, pt, pl;
};

}  // namespace mirrortrain::cuda

#endif  // MIRRORTRAIN_TENSOR_CUDA_CONV_GEOMETRY_CUH_
