#include "common/dtype.h"

namespace nansense::common {

std::string shape_text(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string dtype_name(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Half:
      return "float16";
    case c10::ScalarType::BFloat16:
      return "bfloat16";
    case c10::ScalarType::Float:
      return "float32";
    case c10::ScalarType::Double:
      return "float64";
    case c10::ScalarType::ComplexHalf:
      return "complex32";
    case c10::ScalarType::ComplexFloat:
      return "complex64";
    case c10::ScalarType::ComplexDouble:
      return "complex128";
    case c10::ScalarType::Byte:
      return "uint8";
    case c10::ScalarType::Char:
      return "int8";
    case c10::ScalarType::Short:
      return "int16";
    case c10::ScalarType::Int:
      return "int32";
    case c10::ScalarType::Long:
      return "int64";
    case c10::ScalarType::Bool:
      return "bool";
    // Quantized and other rare types keep c10's name, lower-cased like the rest.
    default: {
      std::string name = c10::toString(dtype);
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return name;
    }
  }
}

std::optional<c10::ScalarType> dtype_of_name(const std::string& name) {
  using c10::ScalarType;
  for (auto dtype : {ScalarType::Half, ScalarType::BFloat16, ScalarType::Float, ScalarType::Double, ScalarType::Byte,
                     ScalarType::Char, ScalarType::Short, ScalarType::Int, ScalarType::Long, ScalarType::Bool}) {
    if (dtype_name(dtype) == name) return dtype;
  }
  return std::nullopt;
}

}  // namespace nansense::common
