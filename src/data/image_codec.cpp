// JPEG and PNG to RGB (see image_codec.h).
//
// libjpeg and libpng report errors by calling a function that must not
// return; both are C libraries, so it longjmps back into the function that
// set it up. Those functions (jpeg_run, png_run) therefore keep no C++
// object with a destructor of their own between setjmp and the library
// calls: what they fill lives in the caller, the error text in a plain
// char array.
#include "data/image_codec.h"

#include <jerror.h>
#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>

// jpeglib.h needs size_t and FILE declared before it.
#include <jpeglib.h>

namespace hpc::data {

namespace {

// ---- JPEG ----------------------------------------------------------------

struct JpegErr {
  jpeg_error_mgr mgr;  // first: libjpeg sees a jpeg_error_mgr*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool corrupt;  // a warning that means lost pixels (truncated or damaged entropy data)
};

[[noreturn]] void jpeg_fail(j_common_ptr c) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  c->err->format_message(c, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings that leave grey or shifted blocks in the picture. Others (extra
// bytes between markers, an unknown APP marker) do not change a pixel and
// are common in real collections, so they pass like they do in PIL.
bool loses_pixels(int code) {
  return code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
         code == JWRN_MUST_RESYNC || code == JWRN_NOT_SEQUENTIAL || code == JWRN_BOGUS_PROGRESSION;
}

void jpeg_note(j_common_ptr c, int level) {
  auto* e = reinterpret_cast<JpegErr*>(c->err);
  if (level < 0 && !e->corrupt && loses_pixels(c->err->msg_code)) {
    c->err->format_message(c, e->message);
    e->corrupt = true;
  }
}

// One libjpeg decode: its inputs, and where its results go.
struct JpegJob {
  const uint8_t* bytes = nullptr;
  size_t size = 0;
  bool header_only = false;
  int scale_num = 8;
  int64_t row0 = 0, row1 = -1, col0 = 0, col1 = -1;  // -1: to the end
  // Results.
  int64_t height = 0, width = 0, scaled_height = 0, scaled_width = 0, first_col = 0, out_width = 0;
  J_COLOR_SPACE color = JCS_UNKNOWN;
  std::vector<uint8_t>* pixels = nullptr;  // rows × out_width × (3, or 4 for CMYK)
  bool cmyk = false;
};

constexpr int64_t CROP_MARGIN = 2;  // see jpeg_run

bool is_cmyk(J_COLOR_SPACE c) { return c == JCS_CMYK || c == JCS_YCCK; }

// False with err.message set on any error. See the file comment on setjmp.
bool jpeg_run(JpegJob& job, JpegErr& err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_note;
  err.corrupt = false;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, job.bytes, static_cast<unsigned long>(job.size));
  jpeg_read_header(&cinfo, TRUE);
  job.height = cinfo.image_height;
  job.width = cinfo.image_width;
  job.color = cinfo.jpeg_color_space;
  if (job.header_only) {
    jpeg_destroy_decompress(&cinfo);
    return true;
  }
  job.cmyk = is_cmyk(cinfo.jpeg_color_space);
  // Grayscale is replicated by libjpeg-turbo's own gray → RGB conversion (what
  // tjDecompress2 does too); CMYK is converted after the fact, in PIL's way.
  cinfo.out_color_space = job.cmyk ? JCS_CMYK : JCS_EXT_RGB;
  cinfo.scale_num = static_cast<unsigned>(job.scale_num);
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  job.scaled_height = cinfo.output_height;
  job.scaled_width = cinfo.output_width;
  const int64_t row1 = job.row1 < 0 ? job.scaled_height : std::min<int64_t>(job.row1, job.scaled_height);
  const int64_t col1 = job.col1 < 0 ? job.scaled_width : std::min<int64_t>(job.col1, job.scaled_width);
  // Columns: CROP_MARGIN more on each side than asked. At the edges of a
  // cropped scanline libjpeg's fancy upsampling replicates the chroma
  // sample it does not have (the image's own edges do so too), which
  // changes a column it would otherwise interpolate; with the margin every
  // column asked for is decoded as in the whole image.
  const int64_t c0 = std::max<int64_t>(0, job.col0 - CROP_MARGIN),
                c1 = std::min(col1 + CROP_MARGIN, job.scaled_width);
  JDIMENSION xoff = static_cast<JDIMENSION>(c0), xlen = static_cast<JDIMENSION>(c1 - c0);
  if (c0 > 0 || c1 < job.scaled_width) jpeg_crop_scanline(&cinfo, &xoff, &xlen);
  job.first_col = xoff;
  job.out_width = cinfo.output_width;
  const int64_t channels = cinfo.output_components;
  job.pixels->resize(static_cast<size_t>(std::max<int64_t>(0, row1 - job.row0) * job.out_width * channels));
  if (job.row0 > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(job.row0));
  for (int64_t r = job.row0; r < row1; ++r) {
    JSAMPROW row = job.pixels->data() + (r - job.row0) * job.out_width * channels;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  if (cinfo.output_scanline == cinfo.output_height)
    jpeg_finish_decompress(&cinfo);
  else
    jpeg_abort_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (err.corrupt) return false;
  return true;
}

// PIL's MULDIV255: a·b/255 rounded, in integers.
inline int muldiv255(int a, int b) {
  const int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// Adobe's inverted CMYK (what libjpeg returns for it) to RGB, as PIL reads
// it ("CMYK;I": every component inverted) and then converts ("cmyk2rgb").
void cmyk_to_rgb(const uint8_t* in, int64_t pixels, uint8_t* out) {
  for (int64_t i = 0; i < pixels; ++i, in += 4, out += 3) {
    const int nk = in[3];  // 255 − K with K = 255 − stored
    for (int c = 0; c < 3; ++c)
      out[c] = static_cast<uint8_t>(std::clamp(nk - muldiv255(255 - in[c], nk), 0, 255));
  }
}

const char* jpeg_color_name(J_COLOR_SPACE c) {
  switch (c) {
    case JCS_GRAYSCALE:
      return "gray";
    case JCS_YCbCr:
      return "YCbCr";
    case JCS_RGB:
      return "RGB";
    case JCS_CMYK:
      return "CMYK";
    case JCS_YCCK:
      return "YCCK";
    default:
      return "unknown";
  }
}

JpegJob run_or_throw(JpegJob job) {
  JpegErr err{};
  if (!jpeg_run(job, err)) throw ImageError(std::string("JPEG: ") + err.message);
  return job;
}

// ---- PNG -------------------------------------------------------------------

struct PngIo {
  const uint8_t* at;
  size_t left;
  char message[200];
};

[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  auto* io = static_cast<PngIo*>(png_get_error_ptr(png));
  std::snprintf(io->message, sizeof io->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_quiet(png_structp, png_const_charp) {}

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
  auto* io = static_cast<PngIo*>(png_get_io_ptr(png));
  if (n > io->left) png_error(png, "file truncated");
  std::memcpy(out, io->at, n);
  io->at += n;
  io->left -= n;
}

struct PngJob {
  bool header_only = false;
  int64_t height = 0, width = 0;
  int color_type = 0;
  std::vector<uint8_t>* pixels = nullptr;  // height × width × 3
  std::vector<png_bytep>* rows = nullptr;  // row pointers into pixels
};

// False with io.message set on any error. See the file comment on setjmp.
bool png_run(PngJob& job, PngIo& io) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &io, png_fail, png_quiet);
  if (!png) {
    std::snprintf(io.message, sizeof io.message, "out of memory");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info || setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
    if (!info) std::snprintf(io.message, sizeof io.message, "out of memory");
    return false;
  }
  png_set_read_fn(png, &io, png_read_mem);
  png_read_info(png, info);
  job.width = png_get_image_width(png, info);
  job.height = png_get_image_height(png, info);
  job.color_type = png_get_color_type(png, info);
  if (job.header_only) {
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
  }
  // PIL's convert("RGB"): the palette looked up, low bit depths scaled to
  // 0-255, 16 bits to their high byte, alpha and tRNS dropped, gray replicated.
  const int bit_depth = png_get_bit_depth(png, info);
  if (job.color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (job.color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (!(job.color_type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(job.width) * 3)
    png_error(png, "unexpected row size after conversion to RGB");
  job.pixels->resize(static_cast<size_t>(job.height * job.width * 3));
  job.rows->resize(static_cast<size_t>(job.height));
  for (int64_t y = 0; y < job.height; ++y)
    (*job.rows)[static_cast<size_t>(y)] = job.pixels->data() + y * job.width * 3;
  png_read_image(png, job.rows->data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

const char* png_color_name(int t) {
  switch (t) {
    case PNG_COLOR_TYPE_GRAY:
      return "gray";
    case PNG_COLOR_TYPE_GRAY_ALPHA:
      return "gray+alpha";
    case PNG_COLOR_TYPE_PALETTE:
      return "palette";
    case PNG_COLOR_TYPE_RGB:
      return "RGB";
    case PNG_COLOR_TYPE_RGB_ALPHA:
      return "RGBA";
    default:
      return "unknown";
  }
}

PngJob png_or_throw(const uint8_t* bytes, size_t size, PngJob job) {
  PngIo io{bytes, size, {}};
  if (!png_run(job, io)) throw ImageError(std::string("PNG: ") + io.message);
  return job;
}

// Images this large are refused before their pixels are allocated: a damaged
// header can claim 65535 × 65535 (12 GiB of RGB) in a few bytes.
constexpr int64_t MAX_PIXELS = int64_t(1) << 28;

void check_size(int64_t height, int64_t width) {
  if (height < 1 || width < 1)
    throw ImageError("image of size " + std::to_string(width) + "x" + std::to_string(height));
  if (height * width > MAX_PIXELS)
    throw ImageError("image of " + std::to_string(width) + "x" + std::to_string(height) +
                     " pixels is larger than hpctrain decodes (2^28 pixels)");
}

}  // namespace

ImageFormat sniff_format(const uint8_t* bytes, size_t size) {
  if (size >= 3 && bytes[0] == 0xFF && bytes[1] == 0xD8 && bytes[2] == 0xFF) return ImageFormat::Jpeg;
  static const uint8_t PNG_MAGIC[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(bytes, PNG_MAGIC, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Unknown;
}

const char* format_name(ImageFormat f) {
  return f == ImageFormat::Jpeg ? "JPEG" : f == ImageFormat::Png ? "PNG" : "unknown";
}

ImageHeader read_header(const uint8_t* bytes, size_t size) {
  ImageHeader h;
  h.format = sniff_format(bytes, size);
  if (h.format == ImageFormat::Jpeg) {
    JpegJob job;
    job.bytes = bytes, job.size = size, job.header_only = true;
    job = run_or_throw(job);
    h.height = job.height, h.width = job.width, h.color = jpeg_color_name(job.color);
  } else if (h.format == ImageFormat::Png) {
    PngJob job;
    job.header_only = true;
    job = png_or_throw(bytes, size, job);
    h.height = job.height, h.width = job.width, h.color = png_color_name(job.color_type);
  } else {
    throw ImageError("not a JPEG or PNG file");
  }
  check_size(h.height, h.width);
  return h;
}

RgbImage decode_rgb(const uint8_t* bytes, size_t size) {
  const ImageHeader h = read_header(bytes, size);
  RgbImage out;
  if (h.format == ImageFormat::Png) {
    std::vector<png_bytep> rows;
    PngJob job;
    job.pixels = &out.pixels, job.rows = &rows;
    job = png_or_throw(bytes, size, job);
    out.height = job.height, out.width = job.width;
    return out;
  }
  JpegRegion r = decode_jpeg_region(bytes, size, 8, 0, h.height, 0, h.width);
  return std::move(r.image);
}

JpegRegion decode_jpeg_region(const uint8_t* bytes, size_t size, int scale_num, int64_t row0, int64_t row1,
                              int64_t col0, int64_t col1) {
  if (scale_num < 1 || scale_num > 8 || row0 < 0 || row1 <= row0 || col0 < 0 || col1 <= col0)
    throw ImageError("JPEG: bad region or scale");
  std::vector<uint8_t> raw;
  JpegJob job;
  job.bytes = bytes, job.size = size, job.scale_num = scale_num;
  job.row0 = row0, job.row1 = row1, job.col0 = col0, job.col1 = col1;
  job.pixels = &raw;
  JpegErr err{};
  // The header first: the size check comes before any pixel memory.
  JpegJob header = job;
  header.header_only = true;
  if (!jpeg_run(header, err)) throw ImageError(std::string("JPEG: ") + err.message);
  check_size(header.height, header.width);
  if (!jpeg_run(job, err)) throw ImageError(std::string("JPEG: ") + err.message);
  JpegRegion out;
  out.first_col = job.first_col;
  out.scaled_height = job.scaled_height;
  out.scaled_width = job.scaled_width;
  out.image.width = job.out_width;
  out.image.height = std::min(row1, job.scaled_height) - row0;
  if (out.image.height <= 0 || col0 >= job.scaled_width) throw ImageError("JPEG: region outside the image");
  if (!job.cmyk) {
    out.image.pixels = std::move(raw);
  } else {
    out.image.pixels.resize(static_cast<size_t>(out.image.height * out.image.width * 3));
    cmyk_to_rgb(raw.data(), out.image.height * out.image.width, out.image.pixels.data());
  }
  return out;
}

std::vector<uint8_t> encode_jpeg(const RgbImage& image, int quality) {
  struct Handle {
    tjhandle h;
    ~Handle() {
      if (h) tjDestroy(h);
    }
  } tj{tjInitCompress()};
  if (!tj.h) throw ImageError("TurboJPEG: cannot start a compressor");
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  const int rc =
      tjCompress2(tj.h, image.pixels.data(), static_cast<int>(image.width), 0, static_cast<int>(image.height),
                  TJPF_RGB, &buf, &size, TJSAMP_420, quality, TJFLAG_ACCURATEDCT);
  std::unique_ptr<unsigned char, void (*)(unsigned char*)> owned(buf, [](unsigned char* p) { tjFree(p); });
  if (rc != 0) throw ImageError(std::string("TurboJPEG: ") + tjGetErrorStr2(tj.h));
  return std::vector<uint8_t>(buf, buf + size);
}

}  // namespace hpc::data
