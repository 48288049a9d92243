#include "tensor/winograd.h"

#include <cmath>
#include <utility>
#include <vector>

namespace mirrortrain::winograd {
namespace {

// a x cols Vandermonde matrix of the finite points and infinity (its last
// row): row j is 1, p_j, p_j^2, ...; infinity's row picks the leading
// coefficient.
std::vector<std::vector<double>> Vandermonde(const std::vector<double>& points,
                                             int cols) {
  const int a = static_cast<int>(points.size()) + 1;
  std::vector<std::vector<double>> v(a, std::vector<double>(cols, 0.0));
  for (int j = 0; j + 1 < a; ++j) {
    for (int k = 0; k < cols; ++k) v[j][k] = std::pow(points[j], k);
  }
  v[a - 1][cols - 1] = 1.0;
  return v;
}

// The inverse of a square matrix by Gauss-Jordan elimination with partial
// pivoting (the a x a Vandermonde matrix of distinct points is regular).
std::vector<std::vector<double>> Inverse(std::vector<std::vector<double>> m) {
  const int n = static_cast<int>(m.size());
  std::vector<std::vector<double>> inv(n, std::vector<double>(n, 0.0));
  for (int i = 0; i < n; ++i) inv[i][i] = 1.0;
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int r = col + 1; r < n; ++r) {
      if (std::fabs(m[r][col]) > std::fabs(m[pivot][col])) pivot = r;
    }
    std::swap(m[col], m[pivot]);
    std::swap(inv[col], inv[pivot]);
    const double scale = 1.0 / m[col][col];
    for (int k = 0; k < n; ++k) {
      m[col][k] *= scale;
      inv[col][k] *= scale;
    }
    for (int r = 0; r < n; ++r) {
      if (r == col || m[r][col] == 0.0) continue;
      const double f = m[r][col];
      for (int k = 0; k < n; ++k) {
        m[r][k] -= f * m[col][k];
        inv[r][k] -= f * inv[col][k];
      }
    }
  }
  return inv;
}

}  // namespace

template <typename T>
Matrices<T> MatricesFor(int r) {
  // For r = 5, 2 and -1/2 beside 0, 1, -1: in a model of the cnn's second
  // conv (32 -> 64 channels) in f32 its forward and filter gradient came
  // 2.5 and 3 times closer to f64 than with +-1/2 or +-2 (NumPy, three
  // seeds; the sets with both halves or both twos were the worst).
  const std::vector<double> points =
      r == 3 ? std::vector<double>{0, 1, -1}
             : std::vector<double>{0, 1, -1, 2, -0.5};
  const int a = r + 1;
  // Transposing the Toom-Cook linear convolution s = V^-1 [(V_m u) (.)
  // (V_r g)] in u gives the correlation y = V_m^T [(V_r g) (.) (V^-T d)].
  const auto v_inv = Inverse(Vandermonde(points, a));
  const auto v_r = Vandermonde(points, r);
  const auto v_m = Vandermonde(points, kTile);
  Matrices<T> mx;
  for (int i = 0; i < a; ++i) {
    for (int j = 0; j < a; ++j) mx.bt[i][j] = static_cast<T>(v_inv[j][i]);
    for (int k = 0; k < r; ++k) mx.g[i][k] = static_cast<T>(v_r[i][k]);
  }
  for (int i = 0; i < kTile; ++i) {
    for (int j = 0; j < a; ++j) mx.at[i][j] = static_cast<T>(v_m[j][i]);
  }
  return mx;
}

template Matrices<float> MatricesFor<float>(int r);
template Matrices<double> MatricesFor<double>(int r);

}  // namespace mirrortrain::winograd
