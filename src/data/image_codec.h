// Reading and writing the image files users keep their data in: JPEG
// (libjpeg-turbo) and PNG (libpng), always to 8-bit RGB.
//
// Decoding follows what PIL's Image.open(f).convert("RGB") gives, because
// that is what a torchvision pipeline trains on: grayscale is replicated,
// a palette expanded, alpha dropped (not composited), 16-bit samples keep
// their high byte, and 4-component JPEGs (CMYK, YCCK) are read as Adobe
// writes them (inverted) and converted with PIL's formula
// R = K' − K'·C/255 in PIL's integer rounding. Gamma and ICC profiles are
// ignored, as PIL does. The IDCT is libjpeg's accurate integer one with
// fancy upsampling (the defaults of both libjpeg and TurboJPEG), so a full
// decode is bit for bit what tjDecompress2 gives for the same bytes.
//
// A JPEG can also be decoded in part, at a DCT-domain scale n/8: the rows
// and columns a crop needs. The rows below the crop are never entropy
// decoded, the rows above are skipped without their IDCT, and the columns
// outside it skip the IDCT and colour conversion (jpeg_crop_scanline widens
// them to whole iMCUs). That is most of the work of a random-resized crop
// of a 500×375 photo to 224×224, which is why the training loader decodes
// through the libjpeg API (TurboJPEG 2.1 has no region decode) and keeps
// TurboJPEG for encoding and as the tests' reference decoder.
//
// Corrupt data is an ImageError: libjpeg's errors and also its warnings
// (a truncated file decodes to grey rows with only a warning), libpng's
// errors. Every function is thread-safe (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace hpc::data {

// A file or byte range that is not a decodable image; what() says why in a few words.
class ImageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ImageFormat { Jpeg, Png, Unknown };

// From the first bytes (the magic number), never from a file name.
ImageFormat sniff_format(const uint8_t* bytes, size_t size);
const char* format_name(ImageFormat f);

struct ImageHeader {
  ImageFormat format = ImageFormat::Unknown;
  int64_t height = 0, width = 0;
  std::string color;  // as stored: "YCbCr", "gray", "CMYK", "YCCK", "RGB", "RGBA", "palette", "gray+alpha"
};

// The header only (no pixel data is decoded). Throws ImageError.
ImageHeader read_header(const uint8_t* bytes, size_t size);

// 8-bit RGB, pixels interleaved, rows contiguous: pixels[(y·width + x)·3 + c].
struct RgbImage {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;
};

// The whole image at full size. Throws ImageError.
RgbImage decode_rgb(const uint8_t* bytes, size_t size);

// Rows [row0, row1) and columns [col0, col1) of a JPEG decoded at scale
// scale_num/8 (1..8; the scaled image is ceil(W·n/8) × ceil(H·n/8), the
// coordinates are in it). The region decoded may start further left
// (iMCU alignment): `image` holds rows [row0, row1) and columns
// [first_col, first_col + image.width) of the scaled image.
struct JpegRegion {
  RgbImage image;
  int64_t first_col = 0;
  int64_t scaled_height = 0, scaled_width = 0;
};
JpegRegion decode_jpeg_region(const uint8_t* bytes, size_t size, int scale_num, int64_t row0, int64_t row1,
                              int64_t col0, int64_t col1);

// The size libjpeg gives the image at scale n/8: ceil(side·n/8).
inline int64_t jpeg_scaled_side(int64_t side, int scale_num) { return (side * scale_num + 7) / 8; }

// A baseline JPEG of `image` (4:2:0, accurate DCT), through TurboJPEG. Throws ImageError.
std::vector<uint8_t> encode_jpeg(const RgbImage& image, int quality);

}  // namespace hpc::data
